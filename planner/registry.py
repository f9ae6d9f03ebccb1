"""One registry of strategies, keyed by the name the API, the UI, the CLI and the tests use.

A strategy is a pure function ``(problem, **options) -> Plan``. Options every strategy
accepts (and may ignore): ``time_limit`` (seconds) and ``seed``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from planner.errors import UnknownStrategyError
from planner.plan import Plan
from planner.problem import Problem

StrategyFn = Callable[..., Plan]


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: StrategyFn
    origin: str  # the system the algorithm comes from
    summary: str  # one line for tables and the UI
    exact: bool = False  # proves optimality (within its time budget)
    slow: bool = False  # may take its whole time budget: run it as a job
    rank: int = 100  # position in listings: simplest first

    def __call__(self, problem: Problem, **options: object) -> Plan:
        return self.fn(problem, **options)


_REGISTRY: dict[str, Strategy] = {}
_loaded = False  # every strategy module imported (one may have been imported directly before)


def register(
    name: str, *, origin: str, summary: str, exact: bool = False, slow: bool = False, rank: int = 100
) -> Callable[[StrategyFn], StrategyFn]:
    def wrap(fn: StrategyFn) -> StrategyFn:
        if name in _REGISTRY:
            raise ValueError(f"strategy {name!r} registered twice")
        _REGISTRY[name] = Strategy(name, fn, origin, summary, exact, slow, rank)
        return fn

    return wrap


def _load_all() -> None:
    import planner.strategies as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


def registered() -> dict[str, Strategy]:
    """Every registered strategy, simplest first (by rank, then name)."""
    global _loaded
    if not _loaded:
        _load_all()
        _loaded = True
    return {s.name: s for s in sorted(_REGISTRY.values(), key=lambda s: (s.rank, s.name))}


def names() -> list[str]:
    return list(registered())


def get(name: str) -> Strategy:
    known = registered()
    if name not in known:
        raise UnknownStrategyError(name, list(known))
    return known[name]
