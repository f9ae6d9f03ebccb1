"""The independent checker catches every kind of planted violation, naming what is wrong."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import Buffer, Placement, Plan, Pool, Problem, check_plan, make_problem, plan
from planner.generate import network_like

PROBLEM = make_problem(
    [Buffer("a", 16, 0, 1), Buffer("b", 16, 1, 2), Buffer("c", 16, 3, 3)],
    alignment=8,
    pools=(Pool("arena", 64),),
)


def good_plan() -> Plan:
    # a and b live together at step 1; c reuses a's bytes later.
    return Plan(
        strategy="by hand",
        offsets={"a": Placement("arena", 0), "b": Placement("arena", 16), "c": Placement("arena", 0)},
        pool_sizes={"arena": 32},
        lower_bound=32,
        naive=48,
    )


def with_offsets(**changes: int) -> Plan:
    base = good_plan()
    offsets = dict(base.offsets)
    for name, offset in changes.items():
        offsets[name] = Placement("arena", offset)
    ends = max(o.offset + 16 for o in offsets.values())
    return replace(base, offsets=offsets, pool_sizes={"arena": ends})


def test_a_good_plan_passes():
    result = check_plan(PROBLEM, good_plan())
    assert result.ok and str(result) == "valid"


def test_overlap_of_live_buffers_is_named():
    result = check_plan(PROBLEM, with_offsets(b=8))
    assert not result.ok
    assert "'a' and 'b'" in str(result) and "step 1" in str(result) and "[8, 16)" in str(result)


def test_reuse_by_buffers_not_live_together_is_fine():
    assert check_plan(PROBLEM, with_offsets(c=16)).ok


def test_misaligned_offset():
    result = check_plan(PROBLEM, with_offsets(c=36))
    assert not result.ok and "alignment of 8" in str(result)


def test_past_capacity():
    result = check_plan(PROBLEM, with_offsets(c=56))
    assert not result.ok and "capacity of 64" in str(result)


def test_pool_size_must_equal_highest_end():
    result = check_plan(PROBLEM, replace(good_plan(), pool_sizes={"arena": 40}))
    assert not result.ok and "highest buffer ends at 32" in str(result)


def test_missing_and_unknown_buffers():
    offsets = dict(good_plan().offsets)
    del offsets["c"]
    offsets["zz"] = Placement("arena", 0)
    result = check_plan(PROBLEM, replace(good_plan(), offsets=offsets))
    assert "'c' has no placement" in str(result) and "'zz'" in str(result)
    assert result.total == 2


def test_unknown_pool_and_pool_not_among_candidates():
    problem = make_problem(
        [Buffer("a", 8, 0, 0, pool_candidates=("fast",)), Buffer("b", 8, 0, 0)],
        pools=(Pool("fast"), Pool("slow")),
    )
    bad = Plan("x", {"a": Placement("slow", 0), "b": Placement("nowhere", 0)}, {"fast": 0, "slow": 8}, 16, 16)
    text = str(check_plan(problem, bad))
    assert "not one of its candidates" in text and "unknown pool 'nowhere'" in text


def test_alias_must_sit_at_its_offset_and_may_overlap_its_root():
    problem = make_problem([Buffer("x", 32, 0, 1), Buffer("y", 16, 1, 2, alias_of="x", alias_offset=16)])
    ok = Plan("x", {"x": Placement("arena", 0), "y": Placement("arena", 16)}, {"arena": 32}, 32, 32)
    assert check_plan(problem, ok).ok
    moved = replace(ok, offsets={"x": Placement("arena", 0), "y": Placement("arena", 32)}, pool_sizes={"arena": 48})
    assert "aliases 'x' at +16" in str(check_plan(problem, moved))


def test_many_violations_are_counted_but_reported_briefly():
    problem = make_problem([Buffer(f"t{i}", 8, 0, 0) for i in range(40)])
    everything_at_zero = Plan("x", {f"t{i}": Placement("arena", 0) for i in range(40)}, {"arena": 8}, 320, 320)
    result = check_plan(problem, everything_at_zero)
    assert result.total == 40 * 39 // 2
    assert len(result.violations) <= 20 and "more)" in str(result)


@pytest.mark.parametrize("strategy", ["first_fit", "greedy_by_size"])
def test_checker_rejects_a_strategy_plan_with_one_offset_moved(strategy):
    problem = make_problem([Buffer(f"t{i}", 64, i, i + 2) for i in range(10)])
    result = plan(problem, strategy)
    assert check_plan(problem, result).ok
    offsets = dict(result.offsets)
    neighbour = offsets["t1"]
    offsets["t2"] = neighbour  # t1 and t2 are live together at steps 2 and 3
    assert not check_plan(problem, replace(result, offsets=offsets)).ok


@st.composite
def placed_problems(draw):
    """A random problem (aliases, two pools, empty buffers) and offsets that may overlap."""
    steps = draw(st.integers(1, 8))
    pools = (Pool("a"), Pool("b")) if draw(st.booleans()) else (Pool("a"),)
    buffers = []
    for i in range(draw(st.integers(0, 10))):
        first = draw(st.integers(0, steps - 1))
        alias = draw(st.sampled_from([None, *[b.id for b in buffers]])) if buffers else None
        buffers.append(
            Buffer(
                f"b{i}",
                draw(st.sampled_from([0, 1, 2, 3, 5])),
                first,
                draw(st.integers(first, steps - 1)),
                alias_of=alias,
                alias_offset=draw(st.sampled_from([0, 2])) if alias else 0,
            )
        )
    problem = Problem(buffers=tuple(buffers), steps=steps, pools=pools)
    offsets = {
        b.id: Placement(draw(st.sampled_from([p.name for p in pools])), draw(st.integers(0, 12))) for b in buffers
    }
    return problem, offsets


def brute_force_overlaps(problem: Problem, offsets: dict[str, Placement]) -> int:
    """Pairs live at a common step, in one pool, overlapping in bytes, not aliases of one another."""

    def root(b: Buffer) -> str:
        seen = {b.id}
        while b.alias_of is not None and b.alias_of not in seen:
            seen.add(b.alias_of)
            b = problem.buffer(b.alias_of)
        return b.id

    count = 0
    for i, a in enumerate(problem.buffers):
        for b in problem.buffers[i + 1 :]:
            pa, pb = offsets[a.id], offsets[b.id]
            if a.size and b.size and pa.pool == pb.pool and root(a) != root(b) and a.overlaps_in_time(b):
                count += pa.offset < pb.offset + b.size and pb.offset < pa.offset + a.size
    return count


@settings(max_examples=400, deadline=None)
@given(case=placed_problems())
def test_overlaps_found_and_counted_like_brute_force(case):
    problem, offsets = case
    sizes = {
        p.name: max([o.offset + problem.buffer(i).size for i, o in offsets.items() if o.pool == p.name] + [0])
        for p in problem.pools
    }
    result = check_plan(problem, Plan("x", offsets, sizes, 0, 0))
    misplaced = sum(
        offsets[b.id] != Placement(offsets[b.alias_of].pool, offsets[b.alias_of].offset + b.alias_offset)
        for b in problem.buffers
        if b.alias_of is not None
    )
    assert result.total == misplaced + brute_force_overlaps(problem, offsets)


@pytest.mark.parametrize("strategy", ["first_fit", "greedy_by_size"])
def test_checker_accepts_plans_of_thousands_of_buffers_and_finds_one_moved(strategy):
    problem = network_like(5000, seed=2)
    result = plan(problem, strategy)
    assert check_plan(problem, result).ok
    # Move one buffer onto a neighbour live at its first step.
    victim = problem.buffers[100]
    neighbour = next(b for b in problem.buffers if b.id != victim.id and b.overlaps_in_time(victim) and b.size)
    offsets = dict(result.offsets)
    offsets[victim.id] = offsets[neighbour.id]
    moved = replace(
        result,
        offsets=offsets,
        pool_sizes={"arena": max(o.offset + problem.buffer(i).size for i, o in offsets.items())},
    )
    verdict = check_plan(problem, moved)
    assert not verdict.ok and f"{victim.id!r}" in str(verdict)
