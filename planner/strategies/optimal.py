"""optimal: an exact planner under a time budget (branch and bound, `planner.exact`).

1. Merge alias groups into blocks, each with its profile (its height step by step); LOAD
   (the most bytes live at one step, groups by their profiles) is the first lower bound. A capacity below LOAD is refused at once, with that bound.
2. Place the blocks greedily (largest first, best fit; and largest first, first fit) and
   keep the smaller arena as the incumbent. Empty blocks sit at offset 0, out of the search.
3. With a capacity: if the incumbent fits, done; otherwise search for a packing within
   the capacity, or a proof that none exists.
   Without one: ask the search for a packing at the lower bound, then just below the
   best arena so far, in rounds with growing node limits; a found packing becomes the
   incumbent, a proof raises the lower bound; stop when they meet or the budget ends.
4. One pool of more than `MAX_SEARCH_BLOCKS` blocks (traces of 10^4 to 10^6 buffers):
   pack it in pieces (`planner.exact.pieces`: blocks live throughout stacked on top, the
   rest cut where no block crosses, each piece by its best greedy order, the highest
   small pieces tightened by the search), and run the greedy heuristics while time is
   left (the fastest, first_fit, always); repack the smallest plans around their peak
   step (`heuristics.repack_smallest`) when above the bound; keep the smallest.
5. Several pools: the greedy plan decides which pool each block goes to, then each pool
   is minimised on its own within its capacity (optimal per pool, not across pools).
6. One pool: never return more than the smallest plan of the greedy heuristics run
   (`planner.strategies.heuristics`), all of them below `MAX_SEARCH_BLOCKS` blocks.

Optimal when `stats["status"]` is "optimal" (the arena equals a proven lower bound);
anytime otherwise: the plan is the best found, `proven_lower_bound` what is known and
`stats["gap"]` the arena over it, minus 1 (at most that far above the optimum).
The searches follow MiniMalloc (Moffitt, ASPLOS 2023): its canonical search under its
three static ranks, and a skyline search on the same ideas, run in turn with
growing node limits, each going on where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.bounds import load
from planner.errors import InfeasibleError, ProblemError
from planner.exact import Budget, SearchResult, decide, minimise
from planner.exact.limits import ExactInfeasibleError, check_time_limit
from planner.exact.pieces import model_of, pack
from planner.orders import LARGEST, LARGEST_CONFLICTED
from planner.placement import Blocks, Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register
from planner.strategies.heuristics import REPACKS, best_heuristic, heuristic_plans, peak_stack, repack_smallest

DEFAULT_TIME_LIMIT = 10.0
# Without a time limit the effort is counted in search nodes (a second or so), so that the
# default answer is the same on every machine; an explicit time limit lifts this cap.
DEFAULT_NODES = 4000
# Beyond this many blocks a Python search rarely improves on the greedy incumbent in a
# useful time, and its per-node cost grows with the block count: the problem is packed in
# pieces instead (`planner.exact.pieces`), the search tightening the small highest ones.
MAX_SEARCH_BLOCKS = 3000


@dataclass
class _PoolResult:
    offsets: np.ndarray  # by block index, for the blocks of this pool
    search: SearchResult


@register(
    "optimal",
    origin="exact search after MiniMalloc (canonical packings, section inference)",
    summary="branch and bound: the smallest arena or a proof, within a time budget",
    exact=True,
    slow=True,
    rank=90,
)
def optimal(
    problem: Problem,
    *,
    time_limit: float | None = None,
    seed: int = 0,
    max_nodes: int | None = None,
    **_: object,
) -> Plan:
    started = time.perf_counter()
    seconds = check_time_limit(time_limit, DEFAULT_TIME_LIMIT)
    if max_nodes is not None and (isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1):
        raise ProblemError(f"max_nodes: must be a positive whole number of search nodes, got {max_nodes!r}")
    if max_nodes is None and time_limit is None:
        max_nodes = DEFAULT_NODES
    budget = Budget(deadline=started + seconds, max_nodes=max_nodes)
    placer = Placer(problem)
    blocks = placer.blocks
    single = len(problem.pools) == 1
    if single:
        _refuse_below_load(problem)
        if int((blocks.size > 0).sum()) > MAX_SEARCH_BLOCKS:
            return _at_scale(problem, placer, started, seconds, max_nodes, seed)
    pools = _greedy_pools(problem, blocks)
    results: dict[int, _PoolResult] = {}
    for k in sorted(set(pools.tolist())):
        members = np.flatnonzero(pools == k)
        share = Budget(deadline=_share(budget, len(problem.pools) - k), max_nodes=max_nodes)
        results[k] = _solve_pool(problem, blocks, members, k, share)
        budget.nodes += share.nodes
    for k, result in results.items():
        for i, offset in zip(np.flatnonzero(pools == k).tolist(), result.offsets.tolist(), strict=True):
            placer.place_at(i, k, int(offset))
    searches = [r.search for r in results.values()]
    status = _overall_status(searches, single)
    bound = max([load(problem)] + [s.lower_bound for s in searches]) if single else load(problem)
    stats = {
        "status": status,
        "proven_lower_bound": bound,
        "nodes": budget.nodes,
        "restarts": sum(s.restarts for s in searches),
        "seconds": round(time.perf_counter() - started, 6),
        "time_limit": seconds,
        "seed": seed,
    }
    if not single:
        stats["pools_assigned_by"] = "greedy_by_size, then each pool minimised on its own"
        return placer.plan("optimal", started, **stats)
    heuristic = best_heuristic(problem, floor=bound)[0] if placer.arena_bytes > bound else None
    if heuristic is not None and heuristic.arena_bytes < placer.arena_bytes:
        # The search ran out of budget above a greedy plan: that plan is the better answer.
        placer = Placer(problem, blocks)
        placer.place_every(blocks.offsets_in(heuristic))
        stats.update(status="optimal" if heuristic.arena_bytes <= bound else "feasible", start=heuristic.strategy)
    stats["gap"] = _gap(placer.arena_bytes, bound)
    return placer.plan("optimal", started, **stats)


def _at_scale(
    problem: Problem, placer: Placer, started: float, seconds: float, max_nodes: int | None, seed: int
) -> Plan:
    """Past the search's reach: the best of the greedy heuristics and of the packing in
    pieces (`planner.exact.pieces`), whose highest pieces the search tightens, and of their
    smallest plans repacked around the peak step (`heuristics.repack_smallest`)."""
    deadline = started + seconds
    # The peak stack first: one pass of the engine, and at LOAD it is proven optimal at once.
    begun = time.perf_counter()
    stacked = _peak_stack_or_none(problem, placer)
    per_run = time.perf_counter() - begun
    if stacked is not None and stacked.arena_bytes <= load(problem):
        placer.place_every(placer.blocks.offsets_in(stacked))
        stats = {"status": "optimal", "proven_lower_bound": load(problem), "gap": 0.0, "nodes": 0, "restarts": 0}
        stats |= {"seconds": round(time.perf_counter() - started, 6), "time_limit": seconds, "seed": seed}
        return placer.plan("optimal", started, **stats, start="peak_stack", tried={"peak_stack": stacked.arena_bytes})
    found = pack(problem, placer.blocks, deadline, search=True, max_nodes=max_nodes)
    plans: list[Plan] = []
    tried: dict[str, int | str] = {}
    if found.arena > found.bound:
        # Two passes of the engine are kept back for the repack below (its first order, and
        # the slack a heuristic's pass may overrun its estimate by), so that it ends in time.
        known = [stacked] if stacked is not None else []
        plans, tried = heuristic_plans(problem, deadline - 2 * per_run, floor=found.bound, known=known)
    placer.place_every(found.offsets)
    start = "pieces"
    if placer.arena_bytes > found.bound and deadline - time.perf_counter() >= per_run:
        # Closing up the holes at the peak of the smallest plans so far: a few passes of the
        # engine each, and the one move that reaches LOAD on some traces.
        plans += _as_plan(placer, "pieces", started)
        for name, result in repack_smallest(problem, plans, placer.blocks, deadline, count=REPACKS, per_run=per_run):
            tried[name] = "infeasible" if result is None else result.arena_bytes
            plans += [result] if result is not None else []
    smallest = min(plans, key=lambda p: p.arena_bytes, default=None)
    if smallest is not None and smallest.arena_bytes < placer.arena_bytes:
        placer.place_every(placer.blocks.offsets_in(smallest))
        start = smallest.strategy
    arena = placer.arena_bytes
    bound = found.bound
    pool = problem.pools[0]
    if pool.capacity is not None and arena > pool.capacity:
        raise ExactInfeasibleError(
            pool.name, arena, pool.capacity, proven=bound > pool.capacity, lower_bound=bound, nodes=found.nodes
        )
    stats = {
        "status": "optimal" if arena <= bound else "feasible",
        "proven_lower_bound": bound,
        "gap": _gap(arena, bound),
        "nodes": found.nodes,
        "restarts": 0,
        "seconds": round(time.perf_counter() - started, 6),
        "time_limit": seconds,
        "seed": seed,
        "start": start,
        "tried": {"pieces": found.arena, **tried},
        "pieces": len(found.heights),
        "stacked_blocks": found.stacked_count,
        "pieces_searched": found.searched,
        "pieces_proven": found.proven,
    }
    return placer.plan("optimal", started, **stats)


def _as_plan(placer: Placer, name: str, started: float) -> list[Plan]:
    """The placer's placement as a plan made by `name`, or none past a pool's capacity."""
    try:
        return [placer.plan(name, started)]
    except InfeasibleError:
        return []


def _peak_stack_or_none(problem: Problem, placer: Placer) -> Plan | None:
    """`heuristics.peak_stack`, or None past a pool's capacity."""
    try:
        return peak_stack(problem, placer.blocks)
    except InfeasibleError:
        return None


def _gap(arena: int, bound: int) -> float:
    """How far above the proven lower bound the plan may be (0.0: proven optimal)."""
    return round(arena / bound - 1, 6) if bound else 0.0


def _refuse_below_load(problem: Problem) -> None:
    pool = problem.pools[0]
    bound = load(problem)
    if pool.capacity is not None and pool.capacity < bound:
        raise ExactInfeasibleError(pool.name, bound, pool.capacity, proven=True, lower_bound=bound)


def _share(budget: Budget, pools_left: int) -> float | None:
    """A deadline giving the next pool its fair part of the time that is left."""
    if budget.deadline is None:
        return None
    now = time.perf_counter()
    return now + max(0.0, budget.deadline - now) / max(1, pools_left)


def _greedy_pools(problem: Problem, blocks: Blocks) -> np.ndarray:
    """The pool of each block: the only pool, or where greedy_by_size puts it."""
    if len(problem.pools) == 1:
        return np.zeros(len(blocks), dtype=np.int64)
    placer = Placer(problem, blocks)
    placer.place_all(LARGEST.of(blocks), rule="best")
    placer.plan("optimal", time.perf_counter())  # raises InfeasibleError when a pool overflows
    return placer.pool.copy()


def _incumbent(problem: Problem, blocks: Blocks, members: np.ndarray, k: int) -> np.ndarray:
    """Offsets of `members` in the smaller of two greedy packings of them alone in pool `k`."""
    sub = blocks.subset(members, [(k,)] * len(members))
    best: tuple[int, np.ndarray] | None = None
    for order, rule in ((LARGEST.of(sub), "best"), (LARGEST_CONFLICTED.of(sub), "first")):
        placer = Placer(problem, sub)
        placer.place_all(order, rule=rule)  # over the capacity if need be: only offsets matter
        if best is None or placer.top[k] < best[0]:
            best = (placer.top[k], placer.offset.copy())
    return best[1] if best else np.zeros(0, dtype=np.int64)


def _solve_pool(problem: Problem, blocks: Blocks, members: np.ndarray, k: int, budget: Budget) -> _PoolResult:
    """Offsets for the blocks of pool `k`, minimised (or decided, with a capacity)."""
    pool = problem.pools[k]
    incumbent = _incumbent(problem, blocks, members, k)
    sized = np.flatnonzero(blocks.size[members] > 0)  # empty blocks sit at 0, apart
    chosen = members[sized]
    model = model_of(blocks, chosen)
    start = incumbent[sized]
    offsets = np.zeros(len(members), dtype=np.int64)
    capacity = pool.capacity
    height = model.height(start)
    fits = capacity is None or height <= capacity
    if len(model) > MAX_SEARCH_BLOCKS:
        found = SearchResult("feasible" if fits else "timeout", model.lower_bound(), start)
    elif capacity is not None and not fits:
        found = decide(model, capacity, budget)
    elif capacity is not None:
        # The greedy plan already fits: answer at once, optimal when it meets LOAD.
        lower = model.lower_bound()
        found = SearchResult("optimal" if height <= lower else "feasible", lower, start)
    else:
        found = minimise(model, start, budget)
    if found.offsets is None:
        assert capacity is not None
        needed = found.lower_bound if found.status == "infeasible" else height
        raise ExactInfeasibleError(
            pool.name,
            needed,
            capacity,
            proven=found.status == "infeasible",
            lower_bound=found.lower_bound,
            nodes=found.nodes,
        )
    offsets[sized] = found.offsets
    return _PoolResult(offsets, found)


def _overall_status(searches: list[SearchResult], single: bool) -> str:
    if not single:
        return "feasible"
    return searches[0].status if searches else "optimal"
