"""Yardsticks every plan is measured against: the live-bytes curve, LOAD and the naive sum.

LOAD, the largest number of bytes live at any one step, is a lower bound on any arena:
the buffers live at that step must all sit in disjoint bytes. The naive sum (no reuse
at all) is the upper yardstick. Buffers that alias another share its bytes, so both
count alias groups (see `planner.aliases`), not buffers.
"""

from __future__ import annotations

import numpy as np

from planner.aliases import blocks_of
from planner.problem import Problem


def live_bytes(problem: Problem) -> np.ndarray:
    """Bytes live at each step, as an int64 array of length `problem.steps`.

    Computed with a difference array, so it costs O(buffers + steps).
    """
    delta = np.zeros(problem.steps + 1, dtype=np.int64)
    blocks = np.array(_blocks(problem), dtype=np.int64).reshape(-1, 3)
    np.add.at(delta, blocks[:, 0], blocks[:, 2])
    np.add.at(delta, blocks[:, 1] + 1, -blocks[:, 2])
    return np.cumsum(delta[:-1])


def _blocks(problem: Problem) -> list[tuple[int, int, int]]:
    if any(b.alias_of is not None for b in problem.buffers):
        return blocks_of(problem)
    return [(b.first, b.last, b.size) for b in problem.buffers]


def load(problem: Problem) -> int:
    """The peak of the live-bytes curve: no valid plan is smaller."""
    curve = live_bytes(problem)
    return int(curve.max()) if curve.size else 0


def peak_step(problem: Problem) -> int:
    """The first step at which LOAD is reached."""
    curve = live_bytes(problem)
    return int(curve.argmax()) if curve.size else 0


def naive(problem: Problem) -> int:
    """The arena with no reuse: the sum of every buffer's (alias group's) size."""
    return sum(size for _, _, size in _blocks(problem))


def live_at(problem: Problem, step: int) -> list[str]:
    """Ids of the buffers live at `step`, largest first (ties by id)."""
    live = [b for b in problem.buffers if b.first <= step <= b.last]
    return [b.id for b in sorted(live, key=lambda b: (-b.size, b.id))]
