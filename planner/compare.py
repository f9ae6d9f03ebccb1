"""Run several strategies on one problem and check each plan: what the CLI, the API and the
benchmarks all show side by side."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from planner.bounds import load, naive, ratio
from planner.check import check_plan
from planner.errors import InfeasibleError
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import get, names


@dataclass(frozen=True)
class StrategyResult:
    """One strategy's result: a checked plan, or the reason it has none."""

    strategy: str
    lower_bound: int
    naive_bytes: int
    seconds: float
    plan: Plan | None = None
    valid: bool = False
    error: str | None = None  # why there is no plan (e.g. the pool is too small)
    violations: str | None = None  # what the checker found wrong, if anything

    @property
    def arena_bytes(self) -> int | None:
        return self.plan.arena_bytes if self.plan else None

    @property
    def ratio(self) -> float | None:
        """Arena over LOAD (`planner.bounds.ratio`); None without a plan."""
        return ratio(self.arena_bytes, self.lower_bound)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "arena_bytes": self.arena_bytes,
            "lower_bound": self.lower_bound,
            "naive_bytes": self.naive_bytes,
            "seconds": round(self.seconds, 6),
            "valid": self.valid,
        }
        if self.error:
            out["error"] = self.error
        if self.violations:
            out["violations"] = self.violations
        return out


def resolve_names(requested: str | Iterable[str]) -> list[str]:
    """'all', one name, a comma-separated list or a list of names -> registered names.

    Raises `UnknownStrategyError` naming the first unknown one and the accepted names.
    """
    if isinstance(requested, str):
        if requested == "all":
            return names()
        requested = [n.strip() for n in requested.split(",") if n.strip()]
    chosen = list(requested)
    for name in chosen:
        get(name)
    return chosen


def run_strategies(
    problem: Problem,
    strategies: Iterable[str],
    *,
    on_done: Callable[[StrategyResult], None] | None = None,
    **options: Any,
) -> list[StrategyResult]:
    """Plan `problem` with each strategy and check every plan with `check_plan`."""
    bound, total = load(problem), naive(problem)
    results = []
    for name in strategies:
        started = time.perf_counter()
        try:
            plan = get(name)(problem, **options)
        except InfeasibleError as e:
            result = StrategyResult(name, bound, total, time.perf_counter() - started, error=str(e))
        else:
            seconds = time.perf_counter() - started
            checked = check_plan(problem, plan)
            result = StrategyResult(
                name, bound, total, seconds, plan, checked.ok, violations=None if checked.ok else str(checked)
            )
        results.append(result)
        if on_done:
            on_done(result)
    return results


def best(results: Iterable[StrategyResult]) -> StrategyResult | None:
    """The valid result with the smallest arena (ties: the one listed first)."""
    valid = [r for r in results if r.valid and r.plan is not None]
    return min(valid, key=lambda r: r.plan.arena_bytes) if valid else None  # type: ignore[union-attr]
