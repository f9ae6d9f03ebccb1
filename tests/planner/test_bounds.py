"""The yardsticks (planner.bounds) against a brute-force count, step by step, of the bytes each
alias group holds: random problems with aliases, zero sizes and idle steps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import (
    Buffer,
    ProblemError,
    check_plan,
    live_bytes,
    live_segments,
    load,
    make_problem,
    naive,
    names,
    peak_step,
    plan,
    ratio,
)
from planner.aliases import rigid


def members_by_hand(problem):
    """{root id: [(first, last, end), ...]}: every buffer follows its alias_of links to a root,
    adding up alias_offsets; `end` is where the member ends above its group's base."""
    by_id = {b.id: b for b in problem.buffers}
    groups = {}
    for b in problem.buffers:
        root, offset = b, 0
        while root.alias_of is not None:
            offset += root.alias_offset
            root = by_id[root.alias_of]
        groups.setdefault(root.id, []).append((b.first, b.last, offset + b.size))
    return groups


def groups_by_hand(problem):
    """{root id: (first, last, size)}: a group as one rectangle, spanning its members'
    lifetimes, as tall as their furthest end."""
    return {
        root: (min(m[0] for m in ms), max(m[1] for m in ms), max(m[2] for m in ms))
        for root, ms in members_by_hand(problem).items()
    }


def curve_by_hand(problem):
    """At each step, each group holds the furthest end of its members live at that step."""
    groups = members_by_hand(problem).values()
    return [
        sum(max((end for first, last, end in ms if first <= step <= last), default=0) for ms in groups)
        for step in range(problem.steps)
    ]


def rigid_curve_by_hand(problem):
    groups = groups_by_hand(problem).values()
    return [sum(size for first, last, size in groups if first <= step <= last) for step in range(problem.steps)]


@st.composite
def problems_with_aliases(draw):
    steps = draw(st.integers(1, 12))
    alignment = draw(st.sampled_from([1, 1, 8]))
    buffers = []
    for i in range(draw(st.integers(0, 12))):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, steps - 1))
        size = draw(st.sampled_from([0, 1, 7, 64, 100, 4096]))
        alias_of, offset = None, 0
        if buffers and draw(st.booleans()):
            target = draw(st.sampled_from(buffers))  # an earlier buffer: no cycles
            # Aliases sit at aligned offsets, as a runtime makes them (a view at byte 1 of
            # an 8-aligned buffer could never be placed).
            alias_of, offset = target.id, alignment * draw(st.integers(0, target.size // alignment))
        buffers.append(Buffer(f"b{i}", size, first, last, alias_of=alias_of, alias_offset=offset))
    return make_problem(buffers, steps=steps, alignment=alignment)


@settings(max_examples=300, deadline=None)
@given(problem=problems_with_aliases())
def test_yardsticks_match_a_brute_force_count(problem):
    curve = curve_by_hand(problem)
    assert live_bytes(problem).tolist() == curve
    starts, values = live_segments(problem)
    ends = [*starts.tolist()[1:], problem.steps]
    assert [v for v, a, b in zip(values.tolist(), starts.tolist(), ends, strict=True) for _ in range(a, b)] == curve
    assert load(problem) == max(curve)
    assert peak_step(problem) == curve.index(max(curve))
    assert naive(problem) == sum(size for _, _, size in groups_by_hand(problem).values())
    assert live_bytes(rigid(problem)).tolist() == rigid_curve_by_hand(problem)
    assert load(rigid(problem)) == max(rigid_curve_by_hand(problem))


@settings(max_examples=60, deadline=None)
@given(problem=problems_with_aliases())
def test_every_plan_is_at_least_load_and_carries_the_yardsticks(problem):
    for name in names():
        if name in ("optimal", "best", "hill_climb"):
            continue  # searches: covered in test_optimal and test_strategies
        result = plan(problem, name)
        assert check_plan(problem, result).ok, name
        peak = max(curve_by_hand(problem))
        assert result.lower_bound == peak and result.naive == naive(problem)
        assert result.arena_bytes >= peak, name
        assert result.ratio == (result.arena_bytes / peak if peak else 1.0)
    if problem.alignment == 1:
        # No reuse and no padding: the naive strategy's arena is the naive sum, exactly.
        assert plan(problem, "naive").arena_bytes == naive(problem)


def test_aliases_count_their_group_once():
    problem = make_problem(
        [
            Buffer("x", 100, 0, 1),
            Buffer("y", 100, 1, 3, alias_of="x"),  # in place over x: the group lives 0..3
            Buffer("tail", 40, 2, 2, alias_of="y", alias_offset=80),  # reaches 20 bytes past x
            Buffer("other", 10, 2, 2),
        ]
    )
    # By hand, the group's profile: 100 at steps 0-1 (x, y), 120 at step 2 (tail), 100 at 3.
    assert live_bytes(problem).tolist() == [100, 100, 130, 100]
    assert load(problem) == 130 and peak_step(problem) == 2
    assert naive(problem) == 130  # not 250, the sum over buffers
    # As one rectangle the group holds 120 bytes from step 0 to step 3.
    assert live_bytes(rigid(problem)).tolist() == [120, 120, 130, 120]
    assert naive(rigid(problem)) == 130


def test_ratio():
    assert ratio(150, 100) == 1.5
    assert ratio(0, 0) == 1.0  # a plan of nothing is as good as can be
    assert ratio(None, 100) is None  # no plan
    result = plan(make_problem([Buffer("a", 8, 0, 0), Buffer("b", 8, 1, 1)]), "naive")
    assert result.ratio == 2.0


def test_no_steps_no_bytes():
    empty = make_problem([], steps=0)
    assert load(empty) == naive(empty) == peak_step(empty) == 0
    assert live_bytes(empty).size == 0


def test_a_trillion_steps_plan_without_a_per_step_array():
    problem = make_problem(
        [Buffer("a", 8, 0, 10**12 - 1), Buffer("b", 8, 5, 10**11), Buffer("c", 8, 10**11 + 1, 10**12 - 1)]
    )
    assert load(problem) == 16 and peak_step(problem) == 5
    result = plan(problem, "greedy_by_size")
    assert check_plan(problem, result).ok and result.arena_bytes == 16
    with pytest.raises(ProblemError, match="too many for a per-step curve"):
        live_bytes(problem)
