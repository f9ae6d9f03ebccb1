"""The yardsticks every plan is measured against, each defined once, here.

- `live_bytes`: the live curve, bytes live at each step (`live_segments`: the same curve as
  constant stretches, for traces with too many steps to list one by one).
- `load` (LOAD): the peak of the live curve. A lower bound on any arena: the buffers live
  at that step must all sit in disjoint bytes. `peak_step`: the first step where it is reached.
- `naive`: the arena with no reuse at all, the upper yardstick.
- `ratio`: arena over LOAD, 1.0 being the best any plan can do.

A buffer that aliases another (``alias_of``) shares its bytes, so every yardstick counts
alias groups (see `planner.aliases`), not buffers, and counts them step by step: at each
step a group holds its profile's height there (the largest member end among its members
live then), so LOAD with aliases is a per-step bound, the true lower bound of placing each
group at one offset. `naive` counts each group once, at its tallest. To measure groups as
rigid rectangles, as they were planned before profiles, pass `planner.aliases.rigid(problem)`.
Anything that shows these numbers (the plan's ``lower_bound`` and ``naive_bytes``, the
charts, the reports) must call these functions.

`live_sum` is the one way bytes live together are added up; the exact search, the
breadth-first strategy and the reordering use it on their own index spaces.
"""

from __future__ import annotations

import numpy as np

from planner.aliases import blocks_of, pieces_of
from planner.errors import ProblemError
from planner.problem import Problem

MAX_DENSE_STEPS = 50_000_000


def live_sum(count: int, start: np.ndarray, stop: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Bytes live at each of `count` positions when block k holds ``size[k]`` bytes at
    positions ``start[k]`` to ``stop[k] - 1`` (0 <= start <= stop <= count).

    A difference array: O(blocks + count), as an int64 array of length `count`.
    """
    delta = np.zeros(count + 1, dtype=np.int64)
    np.add.at(delta, start, size)
    np.add.at(delta, stop, np.negative(size))
    return np.cumsum(delta[:-1])


def live_bytes(problem: Problem) -> np.ndarray:
    """Bytes live at each step, as an int64 array of length `problem.steps` (alias groups once).

    Costs O(buffers + steps); past `MAX_DENSE_STEPS` steps use `live_segments`, which does
    not grow with the step count.
    """
    if problem.steps > MAX_DENSE_STEPS:
        raise ProblemError(
            f"steps: {problem.steps:,} is too many for a per-step curve (at most {MAX_DENSE_STEPS:,}); "
            "use live_segments(), which needs one entry per change"
        )
    first, last, size = _blocks(problem)
    return live_sum(problem.steps, first, last + 1, size)


def live_segments(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """The live curve as (start step, bytes) of each stretch where it is constant.

    The first stretch starts at step 0; each lasts until the next one starts (the last
    until `problem.steps`). Costs O(buffers log buffers) whatever the number of steps, so
    traces with millions of steps (MiniMalloc's) or more are as cheap as small ones.
    """
    return segments_of(*_blocks(problem), problem.steps)


def segments_of(first: np.ndarray, last: np.ndarray, size: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """`live_segments` of blocks given as arrays (alias groups as their profiles' pieces)."""
    points = np.sort(np.concatenate(([0], first, last + 1)))
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    points = points[points < max(steps, 1)]
    values = live_sum(len(points), np.searchsorted(points, first), np.searchsorted(points, last + 1), size)
    return points, values


def load(problem: Problem) -> int:
    """LOAD: the most bytes live at any one step. No valid plan is smaller (0 without steps)."""
    return load_of(*_blocks(problem), problem.steps)


def load_of(first: np.ndarray, last: np.ndarray, size: np.ndarray, steps: int) -> int:
    """`load` of blocks given as arrays (alias groups as their profiles' pieces)."""
    _, values = segments_of(first, last, size, steps)
    return int(values.max()) if values.size and steps else 0


def peak_step(problem: Problem) -> int:
    """The first step at which the live curve reaches LOAD (0 without steps)."""
    starts, values = live_segments(problem)
    return int(starts[values.argmax()]) if values.size and problem.steps else 0


def naive(problem: Problem) -> int:
    """The arena with no reuse: the sum of the sizes of the alias groups, each counted once
    (a buffer aliasing another adds nothing beyond the end of its group). Alignment padding
    is not counted: it depends on the order buffers are stacked in."""
    return naive_of(_blocks(problem, whole=True)[2])


def naive_of(size: np.ndarray) -> int:
    """`naive` of blocks given as an array of sizes (alias groups already merged)."""
    return sum(size.tolist())  # Python integers: a sum of many large sizes may pass 2**63


def ratio(arena_bytes: int | None, lower_bound: int) -> float | None:
    """Arena over LOAD: 1.0 is the best any plan can do. 1.0 when the lower bound is 0 (a
    plan of nothing is perfect); None when there is no plan (`arena_bytes` None)."""
    if arena_bytes is None:
        return None
    return arena_bytes / lower_bound if lower_bound else 1.0


def _blocks(problem: Problem, *, whole: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First step, last step and size of every piece of every alias group's profile (with
    `whole`, of every group as one rectangle, its span and tallest height), as int64 arrays."""
    bufs = problem.buffers
    if any(b.alias_of is not None for b in bufs):
        table = np.array(blocks_of(problem) if whole else pieces_of(problem), dtype=np.int64).reshape(-1, 3)
        return table[:, 0], table[:, 1], table[:, 2]
    n = len(bufs)
    return (
        np.fromiter((b.first for b in bufs), dtype=np.int64, count=n),
        np.fromiter((b.last for b in bufs), dtype=np.int64, count=n),
        np.fromiter((b.size for b in bufs), dtype=np.int64, count=n),
    )
