"""The independent checker catches every kind of planted violation, naming what is wrong."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner import Buffer, Placement, Plan, Pool, check_plan, make_problem, plan

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
