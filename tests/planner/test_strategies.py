"""Every registered strategy against the independent checker, LOAD, and hand-worked answers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from planner import Buffer, InfeasibleError, Pool, Problem, check_plan, load, make_problem, plan
from planner.generate import network_like

ALL = planner.names()
REUSING = [s for s in ALL if s not in ("naive", "bump")]
# Search strategies are bounded by iterations in tests, so results do not depend on the clock.
FAST = {"hill_climb": {"max_iterations": 30, "time_limit": 30.0}, "eject": {"max_moves": 50, "time_limit": 30.0}}


def run(problem: Problem, strategy: str) -> planner.Plan:
    result = plan(problem, strategy, **FAST.get(strategy, {}))
    verdict = check_plan(problem, result)
    assert verdict.ok, f"{strategy}: {verdict}"
    assert result.arena_bytes >= load(problem)
    return result


# MiniMalloc's README example (half-open [lower, upper) there, inclusive here).
MINIMALLOC_EXAMPLE = make_problem(
    [
        Buffer("b1", 4, 0, 2),
        Buffer("b2", 4, 3, 8),
        Buffer("b3", 4, 0, 8),
        Buffer("b4", 4, 9, 20),
        Buffer("b5", 4, 0, 20),
    ]
)

# A small buffer born early takes the bottom, so a later large one cannot reuse it:
# a [0,1] 10 B, b [1,2] 10 B, c [2,3] 20 B. LOAD is 30 (b and c at step 2).
# In first-use order: a@0, b@10 (a is live), c has only [0,10) free below b -> c@20: 40 B.
# Largest first: c@0, a@0 (no overlap with c), b must clear both -> b@20: 30 B.
EARLY_SMALL = make_problem([Buffer("a", 10, 0, 1), Buffer("b", 10, 1, 2), Buffer("c", 20, 2, 3)])

GOLDEN = {
    # strategy: (arena of MINIMALLOC_EXAMPLE, arena of EARLY_SMALL)
    "naive": (20, 40),
    "bump": (20, 40),
    "first_fit": (12, 40),
    "wic": (12, 30),
    "greedy_by_size": (12, 30),
    "greedy_by_breadth": (12, 30),
    "greedy_by_conflicts": (12, 30),
    "best_fit": (12, 30),
    "hill_climb": (12, 30),
    "eject": (12, 30),
    "optimal": (12, 30),
    "best": (12, 30),
}


def test_every_registered_strategy_has_a_golden_answer():
    assert sorted(GOLDEN) == sorted(ALL)


@pytest.mark.parametrize("strategy", ALL)
def test_golden_arenas(strategy):
    example, early_small = GOLDEN[strategy]
    assert load(MINIMALLOC_EXAMPLE) == 12 and load(EARLY_SMALL) == 30
    assert run(MINIMALLOC_EXAMPLE, strategy).arena_bytes == example
    assert run(EARLY_SMALL, strategy).arena_bytes == early_small


@pytest.mark.parametrize("strategy", ALL)
def test_alignment_pads_offsets(strategy):
    # Three 10-byte buffers live together at 64-byte alignment: 0, 64, 128 -> ends at 138.
    problem = make_problem([Buffer(x, 10, 0, 0) for x in "abc"], alignment=64)
    result = run(problem, strategy)
    assert sorted(p.offset for p in result.offsets.values()) == [0, 64, 128]
    assert result.arena_bytes == 138


@pytest.mark.parametrize("strategy", ALL)
def test_per_buffer_alignment(strategy):
    problem = make_problem([Buffer("a", 3, 0, 0), Buffer("b", 5, 0, 0, alignment=16)])
    result = run(problem, strategy)
    assert result.offset("b") % 16 == 0


@pytest.mark.parametrize("strategy", ALL)
def test_buffers_go_to_first_pool_that_fits(strategy):
    pools = (Pool("sram", 100), Pool("dram"))
    problem = make_problem(
        [Buffer("a", 60, 0, 1), Buffer("b", 60, 0, 1), Buffer("c", 8, 0, 1, pool_candidates=("dram",))],
        pools=pools,
    )
    result = run(problem, strategy)
    in_sram = [i for i, p in result.offsets.items() if p.pool == "sram"]
    assert len(in_sram) == 1 and in_sram[0] in ("a", "b")
    assert result.offsets["c"].pool == "dram"
    assert result.pool_sizes["sram"] == 60 and result.pool_sizes["dram"] == 68


@pytest.mark.parametrize("strategy", ALL)
def test_capacity_too_small_names_pool_and_shortfall(strategy):
    problem = EARLY_SMALL.with_capacity(25)
    with pytest.raises(InfeasibleError) as info:
        plan(problem, strategy, **FAST.get(strategy, {}))
    error = info.value
    assert error.pool == "arena" and error.capacity == 25 and error.shortfall == error.needed - 25 > 0
    assert "'arena'" in str(error) and f"{error.shortfall:,}" in str(error)


@pytest.mark.parametrize("strategy", ALL)
def test_alias_shares_bytes(strategy):
    # b is written in place over a (Relu on a dying input); c is live with b.
    problem = make_problem(
        [
            Buffer("a", 16, 0, 1),
            Buffer("b", 16, 1, 2, alias_of="a"),
            Buffer("c", 16, 1, 2),
            Buffer("d", 8, 2, 2, alias_of="c", alias_offset=8),
        ]
    )
    result = run(problem, strategy)
    assert result.offset("b") == result.offset("a")
    assert result.offset("d") == result.offset("c") + 8


@pytest.mark.parametrize("strategy", ALL)
def test_empty_problem(strategy):
    result = run(make_problem([]), strategy)
    assert result.arena_bytes == 0 and not result.offsets


@pytest.mark.parametrize("strategy", ALL)
def test_deterministic(strategy):
    problem = network_like(300, seed=3)
    first, second = run(problem, strategy), run(problem, strategy)
    assert first.offsets == second.offsets


@st.composite
def problems(draw):
    steps = draw(st.integers(1, 25))
    n = draw(st.integers(0, 30))
    buffers = []
    for i in range(n):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, steps - 1))
        size = draw(st.one_of(st.integers(0, 64), st.integers(1, 5000)))
        alignment = draw(st.sampled_from([None, None, None, 8, 32]))
        buffers.append(Buffer(f"t{i}", size, first, last, alignment=alignment))
    alignment = draw(st.sampled_from([1, 4, 64]))
    return Problem(buffers=tuple(buffers), steps=steps, alignment=alignment)


@pytest.mark.parametrize("strategy", ALL)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_random_problems_get_valid_plans_above_load(strategy, problem):
    result = run(problem, strategy)
    if strategy in ("naive", "bump") and problem.alignment == 1 and all(b.alignment is None for b in problem.buffers):
        assert result.arena_bytes == sum(b.size for b in problem.buffers)


@settings(max_examples=40, deadline=None)
@given(problem=problems(), capacity=st.integers(0, 20000))
def test_random_capacities_either_fit_or_name_the_shortfall(problem, capacity):
    bounded = problem.with_capacity(capacity)
    for strategy in REUSING:
        try:
            result = run(bounded, strategy)
        except InfeasibleError as e:
            assert e.needed > capacity
        else:
            assert result.arena_bytes <= capacity


def test_hill_climb_never_worse_than_its_start_and_reports_iterations():
    problem = network_like(400, seed=7)
    start = run(problem, "wic")  # the same size order, placed first-fit
    climbed = plan(problem, "hill_climb", max_iterations=200, time_limit=60.0)
    assert check_plan(problem, climbed).ok
    assert climbed.arena_bytes <= start.arena_bytes
    assert climbed.stats["iterations"] <= 200


def test_registry_is_complete_even_after_a_direct_import():
    import subprocess
    import sys

    code = "import planner.strategies.naive, planner; print(','.join(planner.names()))"
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert listed.split(",") == ALL
