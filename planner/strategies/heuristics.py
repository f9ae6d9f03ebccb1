"""The greedy strategies `optimal` measures itself against: it never returns a plan larger
than the smallest of theirs that it ran. With them, two moves of memplan's own that `best`
and `optimal` try but that are not strategies of their own: the peak stack (`peak_stack`, a
greedy order) and the repack of a plan around its peak step (`peak_repack`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from planner.blocks import Blocks
from planner.bounds import load, peak_step
from planner.errors import InfeasibleError
from planner.orders import FIRST_USE_LARGEST, LARGEST, by
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import registered

# Fastest first (first_fit sweeps), so that a short budget still gets a plan.
HEURISTICS = ("first_fit", "wic", "greedy_by_size", "best_fit", "greedy_by_conflicts", "greedy_by_breadth")


def best_heuristic(
    problem: Problem, deadline: float | None = None, floor: int = 0
) -> tuple[Plan | None, dict[str, int | str]]:
    """The smallest plan of `heuristic_plans` (None when none fits the capacities), and
    what each heuristic made."""
    plans, tried = heuristic_plans(problem, deadline, floor)
    return min(plans, key=lambda p: p.arena_bytes, default=None), tried


def heuristic_plans(
    problem: Problem, deadline: float | None = None, floor: int = 0, known: Sequence[Plan] = ()
) -> tuple[list[Plan], dict[str, int | str]]:
    """The plans of the heuristics and the peak stack that fit the capacities, and what each
    made; those in `known` (made before, by name) are taken as they are. With a deadline
    (a `time.perf_counter` value) one starts only before it, the first one always, the
    others when the time left covers the longest run so far; none starts once a plan is
    down to `floor` bytes."""
    plans: list[Plan] = list(known)
    tried: dict[str, int | str] = {p.strategy: p.arena_bytes for p in known}
    longest = 0.0
    runs: list[tuple[str, Callable[[Problem], Plan]]] = [(name, registered()[name]) for name in HEURISTICS[:3]]
    runs += [("peak_stack", peak_stack)] + [(name, registered()[name]) for name in HEURISTICS[3:]]
    for name, run in runs:
        if name in tried:
            continue
        if len(tried) > len(known) and deadline is not None and deadline - time.perf_counter() < longest:
            break
        if plans and min(p.arena_bytes for p in plans) <= floor:
            break
        begun = time.perf_counter()
        try:
            result = run(problem)
        except InfeasibleError:
            tried[name] = "infeasible"
            continue
        tried[name] = result.arena_bytes
        plans.append(result)
        longest = max(longest, time.perf_counter() - begun)
    return plans, tried


def peak_stack(problem: Problem, blocks: Blocks | None = None) -> Plan:
    """The blocks live at the peak step (`planner.bounds.peak_step`) stacked from offset 0
    in order of first use (ties: the longest-lived first), then the rest largest first in
    the best-fitting gap (raises `InfeasibleError` past a pool's capacity).

    At LOAD's step nothing may be left between the blocks live there; stacked in order of
    arrival, the bytes above the stack stay free before it, where the rest goes. memplan's
    own; not optimal. On two real auto-sharding traces (28,526 and 62,185 buffers) it
    reaches LOAD where the greedy orders stay up to 1.6% above; on a language model's
    training trace it lands 14% above."""
    started = time.perf_counter()
    placer = Placer(problem, blocks)
    b = placer.blocks
    at = peak_step(problem)
    peak = (b.first <= at) & (b.last >= at) & (b.size > 0)
    # Peak blocks by (first, -last), then the rest by (-size, first); each ties by index.
    placer.place_all(by(~peak, np.where(peak, b.first, -b.size), np.where(peak, -b.last, b.first)), rule="best")
    return placer.plan("peak_stack", started, peak_step=at, peak_blocks=int(peak.sum()))


# Plans `best` and `optimal` repack around the peak at most (the smallest of different arenas).
REPACKS = 4
# Orders of the blocks not live at the peak step that `peak_repack` tries, each with its rule.
REPACK_ORDERS = (("first_use", "best"), ("largest", "first"), ("first_use", "first"), ("largest", "best"))


def peak_repack(
    problem: Problem,
    offsets: np.ndarray,
    blocks: Blocks | None = None,
    deadline: float | None = None,
    *,
    start: str = "",
) -> Plan | None:
    """Repack a single-pool placement of `problem` (`offsets`, by block; made by `start`)
    around its peak step: the blocks live at the peak step (`planner.bounds.peak_step`)
    closed up from offset 0 in the order of their offsets, then the others placed around
    them in each of `REPACK_ORDERS` in turn; the smallest placement, or None when none
    fits the capacity (or the problem has several pools). With a deadline (a
    `time.perf_counter` value) an order starts only when the time left covers the longest
    pass so far, the first one always.

    A large-neighbourhood move: where a plan leaves a hole between the blocks live at the
    peak, closing it keeps the order that let the others fit, and placing the others again
    finds them room at the steps where there is slack. memplan's own; not optimal. On a
    language model's training trace (18,692 buffers) greedy_by_size's plan, 0.76% above
    LOAD with one 40 MiB hole at the peak, repacks to LOAD."""
    if len(problem.pools) != 1:
        return None
    started = time.perf_counter()
    placer = Placer(problem, blocks)
    b = placer.blocks
    floor = load(problem)
    at = peak_step(problem)
    peak = (b.first <= at) & (b.last >= at) & (b.size > 0)
    # Each peak block is live with every other one: in any order they stack with no gap.
    keys = {"first_use": FIRST_USE_LARGEST.keys(b), "largest": LARGEST.keys(b)}
    kept: tuple[int, str, str, tuple[np.ndarray, np.ndarray, list[int]]] | None = None
    longest = 0.0
    for tried, (name, rule) in enumerate(REPACK_ORDERS):
        if (kept is not None and kept[0] <= floor) or (
            tried and deadline is not None and deadline - time.perf_counter() < longest
        ):
            break
        begun = time.perf_counter()
        first, second = keys[name]
        placer.reset()
        placer.place_all(by(~peak, np.where(peak, offsets, first), np.where(peak, b.first, second)), rule=rule)
        if placer.feasible and (kept is None or placer.arena_bytes < kept[0]):
            kept = (placer.arena_bytes, name, rule, placer.snapshot())
        longest = max(longest, time.perf_counter() - begun)
    if kept is None:
        return None
    placer.restore(kept[3])
    stats = {"start": start, "peak_step": at, "peak_blocks": int(peak.sum()), "order": kept[1], "rule": kept[2]}
    return placer.plan("peak_repack", started, **stats)


def repack_smallest(
    problem: Problem,
    plans: Sequence[Plan],
    blocks: Blocks,
    deadline: float | None,
    *,
    count: int,
    per_run: float | None = None,
    done: set[int] | None = None,
) -> list[tuple[str, Plan | None]]:
    """`peak_repack` of the `count` smallest of `plans` (single-pool plans of `problem`)
    of different arenas, smallest first, until a plan reaches LOAD: not of one it made, nor
    of one whose arena is in `done`, which it adds to. With `per_run`, each starts only
    while the time left before `deadline` covers that many seconds. Each result (None: it
    fits nowhere) by "peak_repack of NAME", NAME the plan's strategy."""
    floor = load(problem)
    done = set() if done is None else done
    smallest = min((p.arena_bytes for p in plans), default=floor)
    made: list[tuple[str, Plan | None]] = []
    for start in sorted(plans, key=lambda p: p.arena_bytes):
        if count == 0 or smallest <= floor:
            break
        if per_run is not None and deadline is not None and deadline - time.perf_counter() < per_run:
            break
        if start.strategy == "peak_repack" or start.arena_bytes in done:
            continue
        done.add(start.arena_bytes)
        count -= 1
        result = peak_repack(problem, blocks.offsets_in(start), blocks, deadline, start=start.strategy)
        made.append((f"peak_repack of {start.strategy}", result))
        if result is not None:
            smallest = min(smallest, result.arena_bytes)
    return made
