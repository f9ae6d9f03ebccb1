"""Where a run job's time goes, and the run's own time.

The run followed live reports every step to the database, so its wall time is mostly bookkeeping;
the headline time of a run is the median of untraced timed runs made after it (no callbacks, no
tracing), and the job's other phases (loading, preparing, the followed run, the traced run for the
bytes beside the arena, the oracle) are timed and listed beside it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

TIMED_RUNS = 5  # at most, after the followed run
TIMED_BUDGET = 2.0  # seconds: fewer timed runs (at least one) for a model slower than this


class Phases:
    """Wall-clock seconds of a job's phases, in the order they ran: `with phases("loading"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def to_json(self) -> list[dict[str, Any]]:
        return [{"phase": name, "seconds": seconds} for name, seconds in self.seconds.items()]


def timed_runs(
    runner: Any,
    session: Any,
    feeds: dict[str, np.ndarray],
    *,
    runs: int = TIMED_RUNS,
    budget: float = TIMED_BUDGET,
) -> dict[str, Any]:
    """Run `runner` (a prepared Session or Pipeline running `session`) untraced and without callbacks,
    up to `runs` times or until `budget` seconds have passed (at least once); their median is the run's
    time, and `step_seconds` the median of each step's time over them (None without per-step times)."""
    times: list[float] = []
    steps: list[np.ndarray] = []
    started = time.perf_counter()
    while len(times) < runs:
        t0 = time.perf_counter()
        runner.run(feeds, measure="time")
        times.append(time.perf_counter() - t0)
        step_times = getattr(session.stats, "step_times", None)
        if step_times is not None:
            steps.append(np.array(step_times, dtype=np.float64))
        if time.perf_counter() - started > budget:
            break
    same = len(steps) == len(times) and len({s.shape for s in steps}) == 1
    return {
        "step_seconds": [float(x) for x in np.median(np.stack(steps), axis=0)] if same else None,
        "runs": len(times),
        "median_seconds": statistics.median(times),
        "min_seconds": min(times),
        "max_seconds": max(times),
        "seconds": times,
    }
