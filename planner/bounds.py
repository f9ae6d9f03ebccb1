"""Yardsticks every plan is measured against: the live-bytes curve, LOAD and the naive sum.

LOAD, the largest number of bytes live at any one step, is a lower bound on any arena:
the buffers live at that step must all sit in disjoint bytes. The naive sum (no reuse
at all) is the upper yardstick.
"""

from __future__ import annotations

import numpy as np

from planner.problem import Problem


def live_bytes(problem: Problem) -> np.ndarray:
    """Bytes live at each step, as an int64 array of length `problem.steps`.

    Computed with a difference array, so it costs O(buffers + steps).
    """
    delta = np.zeros(problem.steps + 1, dtype=np.int64)
    if problem.buffers:
        first = np.fromiter((b.first for b in problem.buffers), dtype=np.int64, count=len(problem.buffers))
        last = np.fromiter((b.last for b in problem.buffers), dtype=np.int64, count=len(problem.buffers))
        size = np.fromiter((b.size for b in problem.buffers), dtype=np.int64, count=len(problem.buffers))
        np.add.at(delta, first, size)
        np.add.at(delta, last + 1, -size)
    return np.cumsum(delta[:-1])


def load(problem: Problem) -> int:
    """The peak of the live-bytes curve: no valid plan is smaller."""
    curve = live_bytes(problem)
    return int(curve.max()) if curve.size else 0


def peak_step(problem: Problem) -> int:
    """The first step at which LOAD is reached."""
    curve = live_bytes(problem)
    return int(curve.argmax()) if curve.size else 0


def naive(problem: Problem) -> int:
    """The arena with no reuse: the sum of every buffer's size."""
    return sum(b.size for b in problem.buffers)


def live_at(problem: Problem, step: int) -> list[str]:
    """Ids of the buffers live at `step`, largest first (ties by id)."""
    live = [b for b in problem.buffers if b.first <= step <= b.last]
    return [b.id for b in sorted(live, key=lambda b: (-b.size, b.id))]
