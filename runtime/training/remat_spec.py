"""What the faces ask of recomputation: ``off``, ``auto`` or a budget, and the extra FLOPs allowed.

`parse_remat("20MB")`, `parse_remat("0.5")` (half the arena without recomputation) and
`parse_overhead("0.2")` are shared by the CLI (`--remat`, `--remat-overhead`) and the REST
bodies (`remat`, `remat_overhead`); a bad value raises ValueError naming the field and what is
accepted. `rematerialized(step, spec, overhead, ...)` runs the search for a spec that is not off.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import planner
from runtime.options import MemoryOptions
from runtime.training.build import TrainingStep
from runtime.training.remat_search import RematResult, search

DEFAULT_OVERHEAD = 0.2
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
ACCEPTED = (
    "off, auto, a budget in bytes (e.g. 20000000, 20MB, 16MiB) or a fraction of the arena without "
    "recomputation (a number in (0, 1], e.g. 0.5, or a percentage, e.g. 50%)"
)


@dataclass(frozen=True)
class RematSpec:
    mode: str  # "off", "auto", "bytes" or "fraction"
    value: float = 0.0

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def __str__(self) -> str:
        return {"bytes": f"{int(self.value)}", "fraction": f"{self.value:g}"}.get(self.mode, self.mode)


def parse_remat(value: str | int | float | None, field: str = "remat") -> RematSpec:
    """``off`` / ``auto`` / bytes / fraction (see `ACCEPTED`); ValueError naming `field` otherwise."""
    if value is None:
        return RematSpec("off")
    text = str(value).strip().lower()
    if text in ("off", "auto"):
        return RematSpec(text)
    bad = ValueError(f"{field}={value!r}: accepted values are {ACCEPTED}")
    if text.endswith("%"):
        share = _number(text[:-1], bad) / 100
        if not 0 < share <= 1:
            raise bad
        return RematSpec("fraction", share)
    match = re.fullmatch(r"([0-9.eE+-]+)\s*([a-z]*)", text)
    if match is None or match.group(2) not in UNITS:
        raise bad
    number, unit = _number(match.group(1), bad), match.group(2)
    if unit == "" and 0 < number <= 1 and not float(number).is_integer():
        return RematSpec("fraction", number)
    if unit == "" and number == 1:
        return RematSpec("fraction", 1.0)
    size = number * UNITS[unit]
    if size < 1 or not float(size).is_integer():
        raise bad
    return RematSpec("bytes", size)


def parse_overhead(value: str | float | None, field: str = "remat_overhead") -> float:
    """Extra FLOPs allowed, as a fraction of the step's (0.2 is 20%); ValueError naming `field` otherwise."""
    if value is None:
        return DEFAULT_OVERHEAD
    bad = ValueError(f"{field}={value!r}: give the extra FLOPs allowed as a fraction >= 0 of the step's (e.g. 0.2)")
    number = _number(str(value).strip(), bad)
    if number < 0:
        raise bad
    return number


def _number(text: str, bad: ValueError) -> float:
    try:
        number = float(text)
    except ValueError:
        raise bad from None
    if not math.isfinite(number):
        raise bad
    return number


def rematerialized(
    step: TrainingStep,
    spec: RematSpec,
    overhead: float = DEFAULT_OVERHEAD,
    *,
    strategy: str = planner.DEFAULT_STRATEGY,
    options: MemoryOptions | None = None,
    time_limit: float = 30.0,
) -> RematResult | None:
    """The search's answer for `spec` (None when off); its ``step`` is what to run, its ``plan`` where."""
    if not spec.on:
        return None
    return search(
        step,
        budget=int(spec.value) if spec.mode == "bytes" else None,
        budget_fraction=spec.value if spec.mode == "fraction" else None,
        overhead=overhead,
        strategy=strategy,
        options=options,
        time_limit=time_limit,
    )
