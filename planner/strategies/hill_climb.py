"""hill_climb: Apache TVM USMP's hill_climb.

1. Start from the size order (largest first, ties by more conflicts) placed first-fit.
2. Find a buffer that sets the top of the arena; move it to a random earlier position in
   the order (seeded), and re-place every buffer from that position on.
3. Keep the new order if the arena is no larger (sideways moves let it cross plateaus),
   else go back; remember the best arena seen.
4. Stop at LOAD (provably optimal), after `max_iterations`, when `time_limit` seconds
   have passed, or when the top is set by the first buffer in the order (nothing can move
   under it); return the best plan.

A local search: usually better than any single greedy order, never proven optimal unless
it reaches LOAD. Deterministic for a given seed and iteration count.

An alias group's size here is its tallest height (the largest member end); the offset it
takes must hold each piece of its profile (its height step by step) while that piece lives.
"""

from __future__ import annotations

import time

import numpy as np

from planner.bounds import load
from planner.orders import LARGEST_CONFLICTED
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register

DEFAULT_TIME_LIMIT = 2.0
DEFAULT_MAX_ITERATIONS = 20_000


@register(
    "hill_climb",
    origin="Apache TVM USMP (hill_climb)",
    summary="local search over the placement order, seeded, time-bounded",
    rank=80,
)
def hill_climb(
    problem: Problem,
    *,
    time_limit: float | None = None,
    seed: int = 0,
    max_iterations: int | None = None,
    **_: object,
) -> Plan:
    started = time.perf_counter()
    deadline = started + (DEFAULT_TIME_LIMIT if time_limit is None else time_limit)
    limit = DEFAULT_MAX_ITERATIONS if max_iterations is None else max_iterations
    placer = Placer(problem)
    b = placer.blocks
    order = LARGEST_CONFLICTED.of(b)
    placer.place_all(order, rule="first")
    floor = load(problem)
    rng = np.random.default_rng(seed)
    current = (not placer.feasible, placer.arena_bytes)
    best, best_state = current, placer.snapshot()
    iterations = 0
    while best[1] > floor and iterations < limit and time.perf_counter() < deadline:
        iterations += 1
        pos = _position_of_a_top_block(placer, order, rng)
        if pos == 0:
            break  # the top is set by the first buffer placed: nothing can go under it
        target = int(rng.integers(0, pos))
        before = placer.snapshot()
        moved = np.concatenate((order[:target], order[pos : pos + 1], order[target:pos], order[pos + 1 :]))
        placer.unplace(moved[target:])
        completed = placer.place_all(moved[target:], rule="first", give_up_above=current[1])
        candidate = (not placer.feasible, placer.arena_bytes)
        if completed and candidate <= current:
            order, current = moved, candidate
            if candidate < best:
                best, best_state = candidate, placer.snapshot()
        else:
            placer.restore(before)
    placer.restore(best_state)
    return placer.plan("hill_climb", started, iterations=iterations, seed=seed, reached_lower_bound=best[1] <= floor)


def _position_of_a_top_block(placer: Placer, order: np.ndarray, rng: np.random.Generator) -> int:
    """Position in `order` of a randomly chosen block whose end is its pool's top."""
    ends = placer.offset + placer.blocks.size
    tops = np.array(placer.top, dtype=np.int64)[placer.pool]
    on_top = np.flatnonzero(ends == tops)
    chosen = int(on_top[rng.integers(0, on_top.size)])
    return int(np.flatnonzero(order == chosen)[0])
