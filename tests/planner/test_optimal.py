"""The exact planner against a brute force, its proofs, its budget, and the `best` portfolio.

The brute force tries every order of the buffers, each put on top of the buffers already
placed that it meets in time (rounded up to its alignment): every packing where nothing can
drop is one of these, so the smallest is the optimum.
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import pytest

import planner
from planner import Buffer, InfeasibleError, Pool, Problem, ProblemError, check_plan, load, make_problem, plan
from planner.csvio import load_csv
from planner.exact import ExactInfeasibleError
from planner.exact.bounded import BudgetSpent
from planner.exact.driver import PORTFOLIO
from planner.exact.model import Model
from planner.generate import network_like
from planner.placement import Placer

# MiniMalloc's challenging traces, in the shared benchmark folder beside the checkout.
TRACES = Path(__file__).resolve().parents[3] / "shared" / "bench"
CAPACITY = 1_048_576


def brute_force(problem: Problem) -> int:
    """The smallest arena over all orders placed canonically (fine up to 7 buffers)."""
    bufs = [b for b in problem.buffers if b.size > 0]
    best = sum(-(-b.size // problem.align_of(b)) * problem.align_of(b) for b in bufs) + max(
        [problem.align_of(b) for b in bufs], default=0
    )
    for order in itertools.permutations(bufs):
        placed: list[tuple[Buffer, int]] = []
        top = 0
        for b in order:
            below = max((o + p.size for p, o in placed if p.overlaps_in_time(b)), default=0)
            align = problem.align_of(b)
            offset = -(-below // align) * align
            placed.append((b, offset))
            top = max(top, offset + b.size)
            if top >= best:
                break
        else:
            best = top
    return best


def random_problem(rng: random.Random, n: int, *, alignment: int = 1, aligned_buffers: bool = False) -> Problem:
    steps = rng.randint(1, 8)
    buffers = []
    for i in range(n):
        first = rng.randint(0, steps - 1)
        last = rng.randint(first, steps - 1)
        own = rng.choice([None, 8, 16]) if aligned_buffers else None
        buffers.append(Buffer(f"b{i}", rng.randint(1, 40), first, last, alignment=own))
    return Problem(buffers=tuple(buffers), steps=steps, alignment=alignment)


def solve(problem: Problem, **options) -> planner.Plan:
    result = plan(problem, "optimal", **options)
    verdict = check_plan(problem, result)
    assert verdict.ok, verdict
    return result


@pytest.mark.parametrize("seed", range(40))
def test_equals_brute_force_and_proves_one_byte_less_infeasible(seed):
    rng = random.Random(seed)
    problem = random_problem(rng, rng.randint(1, 7))
    best = brute_force(problem)
    result = solve(problem, time_limit=20.0)
    assert result.arena_bytes == best
    assert result.stats["status"] == "optimal" and result.stats["proven_lower_bound"] == best
    assert result.arena_bytes >= load(problem)
    with pytest.raises(ExactInfeasibleError) as info:
        plan(problem.with_capacity(best - 1), "optimal", time_limit=20.0)
    assert info.value.proven and info.value.lower_bound == best and info.value.capacity == best - 1
    assert "proven" in str(info.value) and f"{best:,}" in str(info.value)


@pytest.mark.parametrize("seed", range(15))
def test_alignment_is_honoured_and_still_optimal(seed):
    rng = random.Random(1000 + seed)
    problem = random_problem(rng, rng.randint(2, 6), alignment=rng.choice([4, 32]), aligned_buffers=True)
    result = solve(problem, time_limit=20.0)
    for b in problem.buffers:
        assert result.offset(b.id) % problem.align_of(b) == 0
    assert result.arena_bytes == brute_force(problem)
    assert result.stats["status"] == "optimal"


def _model(problem: Problem) -> Model:
    blocks = Placer(problem).blocks
    sized = blocks.size > 0
    return Model.of(blocks.size[sized], blocks.first[sized], blocks.last[sized], blocks.align[sized])


def _packs(model: Model, offsets, height: int) -> bool:
    """Independently of the searches: every block under the height, no two meeting ones overlap."""
    o = [int(x) for x in offsets]
    n = len(model)
    for i in range(n):
        if o[i] < 0 or o[i] % int(model.align[i]) or o[i] + int(model.size[i]) > height:
            return False
        for j in range(i + 1, n):
            meets = model.first[i] <= model.last[j] and model.first[j] <= model.last[i]
            apart = o[i] + model.size[i] <= o[j] or o[j] + model.size[j] <= o[i]
            if meets and not apart:
                return False
    return True


@pytest.mark.parametrize("kind, order", [(kind, order) for kind, order, _ in PORTFOLIO])
@pytest.mark.parametrize("seed", range(25))
def test_each_search_alone_packs_at_the_optimum_and_proves_one_byte_less(kind, order, seed):
    # Every search of the portfolio must be complete on its own: a wrong proof from any of
    # them would end the driver's round with a false "infeasible".
    rng = random.Random(5000 + seed)
    problem = random_problem(rng, rng.randint(1, 7), alignment=rng.choice([1, 1, 8]), aligned_buffers=seed % 3 == 0)
    best = brute_force(problem)
    model = _model(problem)
    offsets = kind(model, best, order).run()
    assert offsets is not None and _packs(model, offsets, best)
    assert kind(model, best - 1, order).run() is None


@pytest.mark.parametrize("kind, order", [(kind, order) for kind, order, _ in PORTFOLIO])
def test_each_search_stops_at_its_node_limit(kind, order):
    model = _model(_challenging("A"))
    search = kind(model, CAPACITY, order, node_limit=50)  # feasible, but not within 50 nodes
    with pytest.raises(BudgetSpent):
        search.run()
    assert search.nodes == 51  # the node that found the limit spent is counted


def test_capacity_at_the_optimum_is_found():
    # MiniMalloc's README example: 12 bytes exist, the greedy plans need 12 too.
    problem = make_problem(
        [
            Buffer("b1", 4, 0, 2),
            Buffer("b2", 4, 3, 8),
            Buffer("b3", 4, 0, 8),
            Buffer("b4", 4, 9, 20),
            Buffer("b5", 4, 0, 20),
        ]
    )
    result = solve(problem.with_capacity(12))
    assert result.arena_bytes == 12 and result.stats["status"] == "optimal"


def test_capacity_below_load_fails_at_once_with_the_bound():
    problem = network_like(400, seed=5)
    bound = load(problem)
    started = time.perf_counter()
    with pytest.raises(InfeasibleError) as info:
        plan(problem.with_capacity(bound - 1), "optimal", time_limit=60.0)
    assert time.perf_counter() - started < 5.0
    error = info.value
    assert isinstance(error, ExactInfeasibleError) and error.proven and error.nodes == 0
    assert error.needed == bound and error.capacity == bound - 1 and f"{bound:,}" in str(error)


@pytest.mark.parametrize("strategy", ["optimal", "best"])
@pytest.mark.parametrize("limit", [0, -1.5, "soon", float("nan")])
def test_time_limit_must_be_positive(strategy, limit):
    with pytest.raises(ProblemError, match="time_limit"):
        plan(make_problem([Buffer("a", 8, 0, 0)]), strategy, time_limit=limit)


def test_stats_say_what_is_known():
    result = solve(network_like(120, seed=11), time_limit=30.0)
    stats = result.stats
    assert stats["status"] in ("optimal", "feasible")
    assert load(network_like(120, seed=11)) <= stats["proven_lower_bound"] <= result.arena_bytes
    assert stats["nodes"] >= 0 and stats["seconds"] >= 0
    if stats["status"] == "optimal":
        assert stats["proven_lower_bound"] == result.arena_bytes


def test_node_budget_is_deterministic_and_anytime():
    problem = network_like(300, seed=7)  # greedy plans are ~14% above LOAD here
    first = solve(problem, max_nodes=300, time_limit=60.0)
    second = solve(problem, max_nodes=300, time_limit=60.0)
    assert first.offsets == second.offsets and first.stats["nodes"] == second.stats["nodes"]
    greedy = plan(problem, "greedy_by_size").arena_bytes
    assert first.arena_bytes <= greedy
    assert first.stats["status"] in ("optimal", "feasible")


def test_several_pools_are_solved_per_pool_after_greedy_assignment():
    pools = (Pool("sram", 100), Pool("dram"))
    problem = make_problem(
        [Buffer("a", 60, 0, 1), Buffer("b", 60, 0, 1), Buffer("c", 8, 0, 1, pool_candidates=("dram",))],
        pools=pools,
    )
    result = solve(problem)
    assert result.pool_sizes == {"sram": 60, "dram": 68}
    assert "greedy_by_size" in result.stats["pools_assigned_by"] and result.stats["status"] == "feasible"


def _challenging(letter: str) -> Problem:
    path = TRACES / f"minimalloc_{letter}.{CAPACITY}.csv"
    if not path.exists():
        pytest.skip(f"{path.name} is not available here")
    return load_csv(path)


# A-C are packed by the skyline search, J and K by the canonical one (the full eleven run
# in `python bench/exact_bench.py`).
@pytest.mark.parametrize("letter", ["A", "B", "C", "J", "K"])
def test_challenging_instances_fit_in_exactly_one_mebibyte(letter):
    problem = _challenging(letter).with_capacity(CAPACITY)
    greedy = plan(problem.with_capacity(None), "greedy_by_size").arena_bytes
    assert greedy > CAPACITY  # what makes them challenging
    result = solve(problem, time_limit=30.0)
    assert result.arena_bytes <= CAPACITY
    assert result.stats["status"] in ("optimal", "feasible")


def test_a_budget_too_small_for_a_challenging_instance_is_not_a_proof():
    problem = _challenging("A").with_capacity(CAPACITY)
    with pytest.raises(ExactInfeasibleError) as info:
        plan(problem, "optimal", max_nodes=5, time_limit=30.0)
    assert not info.value.proven and "not proven" in str(info.value)
    assert info.value.lower_bound == load(problem) and info.value.needed > CAPACITY


def test_without_capacity_a_challenging_instance_is_minimised_to_load():
    problem = _challenging("A")
    result = solve(problem, time_limit=30.0)
    assert result.arena_bytes == load(problem) == CAPACITY and result.stats["status"] == "optimal"


FAST = [s.name for s in planner.registered().values() if not s.slow and s.name != "best"]
# How many moves best gives the local search (read from the registered module, so that
# this file imports no strategy module before the registry has loaded them all).
CLIMB_ITERATIONS = __import__(planner.get("best").fn.__module__, fromlist=["x"]).CLIMB_ITERATIONS


@pytest.mark.parametrize("seed", [1, 2, 7])
def test_best_is_never_worse_than_any_fast_strategy(seed):
    problem = network_like(150, seed=seed)
    result = plan(problem, "best", seed=0)
    assert check_plan(problem, result).ok
    for name in FAST:
        options = {"max_iterations": CLIMB_ITERATIONS, "seed": 0} if name == "hill_climb" else {}
        assert result.arena_bytes <= plan(problem, name, **options).arena_bytes, name
    assert result.stats["winner"] in planner.names()
    assert result.stats["tried"][result.stats["winner"]] == result.arena_bytes


def test_best_runs_optimal_on_small_hard_problems():
    problem = _challenging("A")
    result = plan(problem, "best", time_limit=30.0)
    assert result.stats["winner"] == "optimal" and result.arena_bytes == CAPACITY


def test_best_under_a_too_small_capacity_names_the_shortfall():
    problem = network_like(60, seed=2)
    with pytest.raises(InfeasibleError) as info:
        plan(problem.with_capacity(load(problem) - 1), "best")
    assert info.value.needed > info.value.capacity


def test_a_deep_search_puts_the_recursion_limit_back():
    import sys

    before = sys.getrecursionlimit()
    problem = _challenging("K").with_capacity(CAPACITY)  # 454 blocks: the search needs a higher limit
    assert 3 * len(problem.buffers) > before
    result = solve(problem, time_limit=30.0)
    assert result.arena_bytes <= CAPACITY and result.stats["nodes"] > 0
    assert sys.getrecursionlimit() == before


def test_best_stacks_the_blocks_live_at_the_peak_and_reaches_load():
    # LOAD by hand: live bytes per step are 48, 64, 224, 208, 272, 256, 16, 80, so 272 at step 4.
    # Stacked at step 4 by first use (b6, b2, b3, b5) from 0 to 272, the rest fits below 224;
    # every greedy order leaves a hole at step 4 (greedy_by_size: 320).
    sizes = {"b0": (80, 7, 7), "b1": (96, 2, 2), "b2": (64, 2, 5), "b3": (80, 3, 5)}
    sizes |= {"b4": (48, 0, 3), "b5": (112, 4, 5), "b6": (16, 1, 4), "b7": (16, 6, 6)}
    problem = Problem(buffers=tuple(Buffer(n, s, a, b) for n, (s, a, b) in sizes.items()), steps=8)
    assert load(problem) == 272
    result = plan(problem, "best")
    assert check_plan(problem, result).ok
    assert result.arena_bytes == 272 and result.stats["winner"] == "peak_stack"
    assert plan(problem, "greedy_by_size").arena_bytes > 272
    stacked = sorted((result.offset(n), n) for n in ("b6", "b2", "b3", "b5"))
    assert stacked == [(0, "b6"), (16, "b2"), (80, "b3"), (160, "b5")]
