"""Yardsticks every plan is measured against: the live-bytes curve, LOAD and the naive sum.

LOAD, the largest number of bytes live at any one step, is a lower bound on any arena:
the buffers live at that step must all sit in disjoint bytes. The naive sum (no reuse
at all) is the upper yardstick. Buffers that alias another share its bytes, so both
count alias groups (see `planner.aliases`), not buffers.
"""

from __future__ import annotations

import numpy as np

from planner.aliases import blocks_of
from planner.errors import ProblemError
from planner.problem import Problem

MAX_DENSE_STEPS = 50_000_000


def live_bytes(problem: Problem) -> np.ndarray:
    """Bytes live at each step, as an int64 array of length `problem.steps`.

    Computed with a difference array, so it costs O(buffers + steps); past
    `MAX_DENSE_STEPS` steps use `live_segments`, which does not grow with the step count.
    """
    if problem.steps > MAX_DENSE_STEPS:
        raise ProblemError(
            f"steps: {problem.steps:,} is too many for a per-step curve (at most {MAX_DENSE_STEPS:,}); "
            "use live_segments(), which needs one entry per change"
        )
    delta = np.zeros(problem.steps + 1, dtype=np.int64)
    blocks = np.array(_blocks(problem), dtype=np.int64).reshape(-1, 3)
    np.add.at(delta, blocks[:, 0], blocks[:, 2])
    np.add.at(delta, blocks[:, 1] + 1, -blocks[:, 2])
    return np.cumsum(delta[:-1])


def _blocks(problem: Problem) -> list[tuple[int, int, int]]:
    if any(b.alias_of is not None for b in problem.buffers):
        return blocks_of(problem)
    return [(b.first, b.last, b.size) for b in problem.buffers]


def live_segments(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """The live-bytes curve as (start step, bytes) of each stretch where it is constant.

    Costs O(buffers log buffers) whatever the number of steps, so traces with millions of
    steps (MiniMalloc's) or more are as cheap as small ones.
    """
    blocks = np.array(_blocks(problem), dtype=np.int64).reshape(-1, 3)
    points = np.unique(np.concatenate(([0], blocks[:, 0], blocks[:, 1] + 1)))
    points = points[points < max(problem.steps, 1)]
    delta = np.zeros(len(points) + 1, dtype=np.int64)
    np.add.at(delta, np.searchsorted(points, blocks[:, 0]), blocks[:, 2])
    np.add.at(delta, np.searchsorted(points, blocks[:, 1] + 1), -blocks[:, 2])
    return points, np.cumsum(delta[:-1])


def load(problem: Problem) -> int:
    """The peak of the live-bytes curve: no valid plan is smaller."""
    _, values = live_segments(problem)
    return int(values.max()) if values.size and problem.steps else 0


def peak_step(problem: Problem) -> int:
    """The first step at which LOAD is reached."""
    starts, values = live_segments(problem)
    return int(starts[values.argmax()]) if values.size and problem.steps else 0


def naive(problem: Problem) -> int:
    """The arena with no reuse: the sum of every buffer's (alias group's) size."""
    return sum(size for _, _, size in _blocks(problem))


def live_at(problem: Problem, step: int) -> list[str]:
    """Ids of the buffers live at `step`, largest first (ties by id)."""
    live = [b for b in problem.buffers if b.first <= step <= b.last]
    return [b.id for b in sorted(live, key=lambda b: (-b.size, b.id))]
