"""What one `Session.run` cost (the arena, bytes allocated beside it, time per step, copies), and
`measure_runs`: time and memory measured in separate runs, the way `memplan run` reports them."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StepRecord:
    index: int
    node: str
    op_type: str
    seconds: float


@dataclass
class RunStats:
    """What one `run` cost: the arena, bytes allocated beside it, time per step, copies."""

    arena_bytes: int
    outside_arena_bytes: int | None  # tracemalloc peak during the loop; None unless measure="memory"
    seconds: float  # the loop's wall time; inflated by tracing when `traced`
    copies: int = 0  # arrays copied into or out of the arena (inputs, outputs, non-aliased views)
    copied_bytes: int = 0
    constant_bytes: int = 0  # parameters, kept outside the arena
    fallbacks: dict[str, str] = field(default_factory=dict)  # bound tensor -> why it was copied
    measure: str = "time"  # what the run measured: "time" (no tracing) or "memory" (tracemalloc on)
    traced: bool = False  # tracemalloc was on during the loop (a memory run, or the caller's own tracing)
    route: str = "steps"  # "program": the session's whole-model compiled call (`runtime.program`), no step times
    # (node, op type) per step and each step's seconds: `trace` is made from them when read.
    step_labels: Sequence[tuple[str, str]] = field(default=(), repr=False)
    step_times: np.ndarray | None = field(default=None, repr=False, compare=False)
    _trace: list[StepRecord] | None = field(default=None, repr=False, compare=False)

    @property
    def trace(self) -> list[StepRecord]:
        """One record per step, in step order (made on first read: a run only keeps the times)."""
        if self._trace is None:
            times = [] if self.step_times is None else self.step_times.tolist()
            self._trace = [
                StepRecord(i, node, op, t)
                for i, ((node, op), t) in enumerate(zip(self.step_labels, times, strict=True))
            ]
        return self._trace

    @property
    def step_seconds(self) -> list[float]:
        return [] if self.step_times is None else self.step_times.tolist()

    @property
    def outside_ratio(self) -> float | None:
        if self.outside_arena_bytes is None:
            return None
        return self.outside_arena_bytes / self.arena_bytes if self.arena_bytes else 0.0

    def count_copy(self, nbytes: int) -> None:
        self.copies += 1
        self.copied_bytes += nbytes


@dataclass(frozen=True)
class Measurement:
    """Bytes beside the arena from one traced run; times from untraced runs."""

    outputs: dict[str, np.ndarray]  # the memory run's (every run computes the same)
    outside_arena_bytes: int | None
    seconds: list[float]  # each timed run's loop
    step_seconds: list[float]  # each step's median over the timed runs

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)


def measure_runs(
    session: Any,
    inputs: Mapping[str, np.ndarray] | None,
    repeat: int,
    on_step: Callable[[int, int, str, float], None] | None = None,
) -> Measurement:
    """Run a prepared `Session` (or `Pipeline`) once with ``measure="memory"`` for the bytes
    allocated beside the arena (which is also the warm-up), then `repeat` times with
    ``measure="time"`` for the times, so that no reported time runs under tracemalloc."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat}: give at least one timed run")
    outputs = session.run(inputs, on_step=on_step, measure="memory")
    outside = session.stats.outside_arena_bytes
    runs: list[RunStats] = []
    for _ in range(repeat):
        session.run(inputs, on_step=on_step, measure="time")
        runs.append(session.stats)
    steps = [statistics.median(per_step) for per_step in zip(*(r.step_seconds for r in runs), strict=True)]
    return Measurement(outputs, outside, [r.seconds for r in runs], steps)
