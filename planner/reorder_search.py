"""How `planner.reorder` spends its time budget, segment by segment (steps 3-5 of its doc).

1. Quick exact search (`planner.reorder_exact`) of every segment small enough, largest peak
   first, within a small state budget: most real models' segments are proven here.
2. Segments still open get beams of growing width over the frontier (a share of the time).
3. Local search on the whole order (the heuristic the exact search replaced): move a random
   step to a random slot between its last producer and first consumer, keep moves that do
   not raise LOAD. Seeded, bounded by time and iterations; run from the best order so far and
   from the greedy one, as their local optima often differ, then on from the better one.
4. Full exact search of the segments still open, seeded by the local search's peaks, with
   the time left (none left when every open segment has over `HOPEFUL_STEPS` steps: an
   irregular graph that size is past the exact search in seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.reorder_exact import SegmentResult, beam_segment, must_live_floor, segments, solve_segment
from planner.reorder_steps import StepGraph, positions

HOPEFUL_STEPS = 64  # segments past this many steps get no second exact search (4): time goes to 3
QUICK_STATES = 20_000  # states of the first, quick exact search of each segment
QUICK_SHARE, BEAM_SHARE, LOCAL_SHARE = 0.1, 0.25, 0.85  # of the budget, cumulative deadlines


@dataclass(frozen=True)
class Outcome:
    order: list[int]
    method: str  # "exact", "divided" or "heuristic"
    proven: bool
    bound: int
    segments: int
    exact_segments: int
    budget_hit: bool
    iterations: int


@dataclass(frozen=True)
class Budget:
    started: float
    seconds: float
    limit: int  # segment (and graph) size the exact search takes on
    max_states: int
    seed: int
    max_iterations: int | None

    def until(self, share: float) -> float:
        return self.started + share * self.seconds


def search(g: StepGraph, start: list[int], budget: Budget) -> Outcome:
    """The best order found from `start` (a valid order), and what is known of it."""
    pieces = segments(g)
    exact = [s for s in pieces if len(s) <= budget.limit] if g.n > budget.limit else pieces
    floor = max([g.step_floor()] + [must_live_floor(g, s) for s in exact])
    orders, peaks = _split(g, pieces, start)
    results: dict[int, SegmentResult] = {}

    def solve(piece: range, deadline: float, max_states: int) -> None:
        nonlocal floor
        result = solve_segment(
            g,
            piece,
            incumbent=peaks[piece.start],
            floor=floor,
            deadline=deadline,
            max_states=max_states,
            fallback=orders[piece.start],
        )
        results[piece.start] = result
        if result.order is not None:
            orders[piece.start], peaks[piece.start] = result.order, result.peak
        if result.proven:
            floor = max(floor, result.peak)

    for piece in sorted(exact, key=lambda s: (-peaks[s.start], s.start)):
        solve(piece, budget.until(QUICK_SHARE), min(budget.max_states, QUICK_STATES))
    still_open = [s for s in exact if not results[s.start].proven]
    iterations = 0
    if still_open or len(exact) < len(pieces):
        for piece in still_open:
            orders[piece.start], peaks[piece.start] = _beams(
                g, piece, orders[piece.start], peaks[piece.start], floor, budget
            )
        order = [t for piece in pieces for t in orders[piece.start]]
        hopeful = any(len(s) <= HOPEFUL_STEPS for s in still_open)
        order, iterations = _two_starts(g, order, start, budget, budget.until(LOCAL_SHARE if hopeful else 1.0))
        searched_orders, searched_peaks = _split(g, pieces, order)
        for piece in pieces:
            if searched_peaks[piece.start] < peaks[piece.start]:
                orders[piece.start], peaks[piece.start] = searched_orders[piece.start], searched_peaks[piece.start]
        for piece in sorted(still_open, key=lambda s: (-peaks[s.start], s.start)):
            if peaks[piece.start] > floor:
                solve(piece, budget.until(1.0), budget.max_states)
    order = [t for piece in pieces for t in orders[piece.start]]
    proven = all((s.start in results and results[s.start].proven) or peaks[s.start] <= floor for s in pieces)
    bound = max([floor] + [r.bound for r in results.values()])
    method = "exact" if g.n <= budget.limit else "divided" if results and len(pieces) > 1 else "heuristic"
    exact_count = sum(1 for s in exact if results[s.start].proven or peaks[s.start] <= floor)
    budget_hit = any(not results[s.start].proven and peaks[s.start] > floor for s in exact)
    return Outcome(order, method, proven, bound, len(pieces), exact_count, budget_hit, iterations)


def _two_starts(g: StepGraph, order: list[int], start: list[int], budget: Budget, end: float) -> tuple[list[int], int]:
    """Local search from the best order so far and from `start` (their local optima often
    differ), a quarter of the time each; the better one goes on for the rest."""
    if order == start:
        return local_search(g, order, budget, end)
    quarter = (end - time.perf_counter()) / 4
    first, tried = local_search(g, order, budget, time.perf_counter() + quarter)
    second, more = local_search(g, start, budget, time.perf_counter() + quarter)
    better = min((first, second), key=lambda o: g.load(positions(o)))
    last, rest = local_search(g, better, budget, end)
    return last, tried + more + rest


def _split(g: StepGraph, pieces: list[range], order: list[int]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Each segment's steps in `order`, and their peak: every order runs a segment's steps at the
    same positions, the segment's own range."""
    rank = positions(order)
    live = g.profile(rank)
    orders = {s.start: sorted(s, key=lambda t: rank[t]) for s in pieces}
    return orders, {s.start: int(live[s.start : s.stop].max()) for s in pieces}


def _beams(
    g: StepGraph, piece: range, order: list[int], peak: int, floor: int, budget: Budget
) -> tuple[list[int], int]:
    """Step 2 of the module doc: the best of `order` and beams of width 1, 4, 16, ... while each
    beam holds at most about `max_states` states (deterministic below the deadline)."""
    width = 1
    while peak > floor and (width == 1 or width * len(piece) <= budget.max_states):
        found = beam_segment(g, piece, floor=floor, width=width, deadline=budget.until(BEAM_SHARE))
        if found is None:
            break
        if found[1] < peak:
            order, peak = found
        width *= 4
    return order, peak


def local_search(g: StepGraph, start: list[int], budget: Budget, deadline: float) -> tuple[list[int], int]:
    """Step 3 of the module doc: the best order seen, and the moves tried."""
    order, rank = list(start), positions(start)
    current = best = g.load(rank)
    best_order = list(start)
    rng = np.random.default_rng(budget.seed)
    iterations = 0
    limit = budget.max_iterations if budget.max_iterations is not None else 1_000_000
    while g.n > 2 and iterations < limit and time.perf_counter() < deadline:
        iterations += 1
        moved = _random_move(order, rank, g, rng)
        if moved is None:
            continue
        moved_rank = positions(moved)
        value = g.load(moved_rank)
        if value <= current:
            order, rank, current = moved, moved_rank, value
            if value < best:
                best_order, best = list(moved), value
    return best_order, iterations


def _random_move(order: list[int], rank: np.ndarray, g: StepGraph, rng: np.random.Generator) -> list[int] | None:
    """Move one step to a random slot between its last producer and first consumer."""
    k = int(rng.integers(0, len(order)))
    t = order[k]
    lo = max((int(rank[p]) for p in g.preds[t]), default=-1) + 1
    hi = min((int(rank[s]) for s in g.succs[t]), default=len(order)) - 1
    if hi <= lo:
        return None
    target = int(rng.integers(lo, hi + 1))
    if target == k:
        return None
    moved = order[:k] + order[k + 1 :]
    moved.insert(target, t)
    return moved
