"""best: a portfolio that keeps the smallest plan, the default in the UI.

Where it comes from: memplan's own, over the strategies above; the same idea as XLA's
ChooseBestHeapAlgorithm (run several heaps, keep the smallest).

1. Run every fast strategy (registered without ``slow``), simplest first; the local search
   gets part of the time limit and a bounded number of moves. Stop early once a plan
   reaches LOAD: none can be smaller.
2. Pack the problem in pieces (`planner.exact.pieces`: blocks live throughout stacked on
   top, the rest cut where no block crosses, each piece by its best greedy order), kept
   as "pieces". Past `LARGE_BLOCKS` blocks (traces of 10^4 to 10^6 buffers) step 3 and
   this come first, as they are the likeliest to reach LOAD (step 3 first, as it is one
   pass of the engine where this is several), and a strategy of step 1 starts only when
   the time left covers its passes of the engine, each as long as the longest pass so far.
3. Stack the blocks live at the peak step from offset 0 in order of first use, then place
   the rest largest first in the best-fitting gap (`heuristics.peak_stack`), kept as
   "peak_stack": on two real auto-sharding traces (28,526 and 62,185 buffers) it reaches
   LOAD, where the best greedy order of the first stays 1.6% above.
4. Repack the smallest plan so far around its peak step (`heuristics.peak_repack`: the
   blocks live at the peak closed up in that plan's order, the rest placed again by a few
   greedy orders), kept as "peak_repack": on a language model's training trace (18,692
   buffers) it closes the one 40 MiB hole the greedy orders leave at the peak, 1.0076x
   LOAD -> 1.0000x. At the end it repacks up to `REPACKS` more of the smallest plans of
   different arenas. Past `LARGE_BLOCKS` blocks it also comes right after steps 2 and 3,
   and each repack starts only when the time left covers a pass of the engine.
5. When no plan reached LOAD and the problem is small (at most `SMALL_BLOCKS` blocks), run
   `optimal` on the rest of the budget. Without an explicit time limit it is also bounded
   by a node count, so that the result does not depend on the machine's speed (unless
   the time runs out first); a time limit given lifts the count, as for `optimal`.
6. Keep the smallest plan that the independent checker accepts (ties: the first tried);
   `stats["winner"]` names the strategy that made it, `stats["gap_to_load"]` its arena
   over LOAD minus 1.
7. When no strategy fits the pools' capacities, raise the most telling failure: a proven
   one first, then the one needing the fewest bytes.

Optimal when the winning plan meets LOAD or `optimal` proved it; otherwise never worse
than any fast strategy below `LARGE_BLOCKS` blocks (above, than any that it ran).
"""

from __future__ import annotations

import time
from typing import Any

from planner.bounds import load
from planner.check import check_plan
from planner.errors import InfeasibleError
from planner.exact.limits import check_time_limit
from planner.exact.pieces import pack
from planner.placement import Blocks, Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register, registered
from planner.strategies.heuristics import REPACKS, peak_stack, repack_smallest

DEFAULT_TIME_LIMIT = 5.0
SMALL_BLOCKS = 3000  # optimal on the rest of the budget up to this many blocks (SOMAS ResNet-50, 1,042)
LARGE_BLOCKS = 3000  # past this many blocks, the packing in pieces first and the rest while time is left
# Passes of the engine over the whole problem a strategy makes (1 unless listed), to judge
# past `LARGE_BLOCKS` whether it can end within the time left.
PASSES = {"best_fit": 2}
OPTIMAL_NODES = 4000
SEARCH_SHARE = 0.3  # of the time limit, for the local search
FINISH_SHARE = 0.1  # of the time limit, left after the packing in pieces to build and check its plan
CLIMB_ITERATIONS = 500  # and at most this many moves, so that the answer is reproducible


@register(
    "best",
    origin="memplan (portfolio of the strategies above)",
    summary="every fast strategy, optimal briefly on small problems; the smallest plan",
    rank=95,
)
def best(problem: Problem, *, time_limit: float | None = None, seed: int = 0, **options: Any) -> Plan:
    started = time.perf_counter()
    seconds = check_time_limit(time_limit, DEFAULT_TIME_LIMIT)
    deadline = started + seconds
    floor = load(problem)
    tried: dict[str, int | str] = {}
    plans: list[Plan] = []
    failures: list[InfeasibleError] = []
    repacked: set[int] = set()  # arenas of the plans repacked
    blocks = Blocks.of(problem)
    large = len(blocks) > LARGE_BLOCKS
    single = len(problem.pools) == 1

    def reached() -> bool:
        return bool(plans) and min(p.arena_bytes for p in plans) <= floor

    per_run = 0.0  # seconds of one pass of the engine over the problem, the longest seen
    if large and single:
        begun = time.perf_counter()
        _peak_stack(problem, blocks, tried, plans, failures)  # one pass: cheap, and it may reach LOAD
        per_run = time.perf_counter() - begun
        if not reached():
            # A pass of the engine kept back for the repack after it.
            until = deadline - FINISH_SHARE * seconds - per_run
            per_run = max(per_run, _pieces(problem, blocks, until, tried, plans, failures))
        _repack(problem, blocks, deadline, tried, plans, repacked, count=1, per_run=per_run)
    for name, strategy in registered().items():
        if strategy.slow or name == "best" or reached():
            continue
        left = deadline - time.perf_counter()
        if large and plans and left < per_run * PASSES.get(name, 1):
            tried[name] = "not run: time limit"
            continue
        begun = time.perf_counter()
        extra = {"time_limit": max(1e-3, min(seconds * SEARCH_SHARE, left)), "max_iterations": CLIMB_ITERATIONS}
        if name != "hill_climb":
            extra = {}
        _attempt(problem, name, {**options, "seed": seed, **extra}, tried, plans, failures)
        per_run = max(per_run, (time.perf_counter() - begun) / PASSES.get(name, 1))
    if single and not large and not reached() and time.perf_counter() < deadline:
        _pieces(problem, blocks, deadline, tried, plans, failures)
    if single and not large and not reached():
        _peak_stack(problem, blocks, tried, plans, failures)
    if single:
        _repack(problem, blocks, deadline, tried, plans, repacked, count=REPACKS, per_run=per_run if large else None)
    small = len(blocks) <= SMALL_BLOCKS
    left = deadline - time.perf_counter()
    if small and left > 0 and not reached():
        # Without a time limit, a node count bounds the search so that the answer is the same
        # on every machine (as `optimal` does); an explicit time limit lifts it.
        nodes = OPTIMAL_NODES if time_limit is None else None
        budget = {"time_limit": left, "max_nodes": nodes, "seed": seed}
        _attempt(problem, "optimal", budget, tried, plans, failures)
    if not plans:
        raise min(failures, key=lambda e: (not getattr(e, "proven", False), e.needed))
    winner = min(plans, key=lambda p: p.arena_bytes)  # the first listed wins ties
    stats = {
        "winner": winner.strategy,
        "tried": tried,
        "winner_stats": dict(winner.stats),
        "gap_to_load": round(winner.arena_bytes / floor - 1, 6) if floor else 0.0,
    }
    return Plan(
        strategy="best",
        offsets=winner.offsets,
        pool_sizes=winner.pool_sizes,
        lower_bound=winner.lower_bound,
        naive=winner.naive,
        elapsed_s=time.perf_counter() - started,
        stats=stats,
        alias_groups=winner.alias_groups,
    )


def _attempt(
    problem: Problem,
    name: str,
    options: dict[str, Any],
    tried: dict[str, int | str],
    plans: list[Plan],
    failures: list[InfeasibleError],
) -> None:
    """Run one strategy; record its arena (or why it has none) and keep a checked plan."""
    try:
        result = registered()[name](problem, **options)
    except InfeasibleError as e:
        failures.append(e)
        tried[name] = "infeasible"
        return
    _keep_checked(problem, result, tried, plans)


def _keep_checked(problem: Problem, result: Plan, tried: dict[str, int | str], plans: list[Plan]) -> None:
    if check_plan(problem, result).ok:
        plans.append(result)
        tried[result.strategy] = result.arena_bytes
    else:
        tried[result.strategy] = "invalid"


def _peak_stack(
    problem: Problem, blocks: Blocks, tried: dict[str, int | str], plans: list[Plan], failures: list[InfeasibleError]
) -> None:
    """Step 3 (`planner.strategies.heuristics.peak_stack`), kept when checked."""
    try:
        result = peak_stack(problem, blocks)
    except InfeasibleError as e:
        failures.append(e)
        tried["peak_stack"] = "infeasible"
        return
    _keep_checked(problem, result, tried, plans)


def _repack(
    problem: Problem,
    blocks: Blocks,
    deadline: float,
    tried: dict[str, int | str],
    plans: list[Plan],
    done: set[int],
    *,
    count: int,
    per_run: float | None,
) -> None:
    """Step 4 (`planner.strategies.heuristics.repack_smallest`) on the plans so far, each
    repacked plan kept when checked and recorded under "peak_repack of NAME" in `tried`."""
    for name, result in repack_smallest(problem, plans, blocks, deadline, count=count, per_run=per_run, done=done):
        if result is None:
            tried[name] = "infeasible"
        elif check_plan(problem, result).ok:
            plans.append(result)
            tried[name] = result.arena_bytes
        else:
            tried[name] = "invalid"


def _pieces(
    problem: Problem,
    blocks: Blocks,
    deadline: float,
    tried: dict[str, int | str],
    plans: list[Plan],
    failures: list[InfeasibleError],
) -> float:
    """The packing in pieces (`planner.exact.pieces`, greedy orders only), kept as "pieces".
    Returns the seconds of one of its passes of the engine."""
    started = time.perf_counter()
    found = pack(problem, blocks, deadline, search=False)
    per_run = (time.perf_counter() - started) / max(1, found.runs)
    placer = Placer(problem, blocks)
    placer.place_every(found.offsets)
    try:
        result = placer.plan("pieces", started, orders=found.orders, stacked_blocks=found.stacked_count)
    except InfeasibleError as e:
        failures.append(e)
        tried["pieces"] = "infeasible"
        return per_run
    _keep_checked(problem, result, tried, plans)
    return per_run
