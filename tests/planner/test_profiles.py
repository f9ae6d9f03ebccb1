"""Alias groups whose size changes over time: a group is one offset with a height that follows
its live members, and the bytes above it are free for other blocks.

Oracles: the independent checker (`planner.check_plan`), arenas computed by hand, and for
small problems an exhaustive search over every offset (`best_by_brute_force`), which shares
no code with the planner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import Buffer, Placement, Plan, check_plan, load, make_problem, names, plan
from planner.aliases import profile, rigid
from planner.exact import CanonicalSearch, SkylineSearch
from planner.exact.pieces import model_of
from planner.placement import Blocks, Placer

# A concat written in place: slice `a` (0..2) sits at byte 0, slice `b` (2..2) at byte 100 of
# `cat` (2..3, 200 bytes); `x` (100 bytes, steps 0..1) lives beside the early slice only.
CONCAT = make_problem(
    [
        Buffer("cat", 200, 2, 3),
        Buffer("a", 100, 0, 2, alias_of="cat"),
        Buffer("b", 100, 2, 2, alias_of="cat", alias_offset=100),
        Buffer("x", 100, 0, 1),
    ]
)


def test_profile_follows_the_live_members():
    assert profile([(0, 2, 100), (2, 2, 200), (2, 3, 200)]) == [(0, 1, 100), (2, 3, 200)]
    # A member alone; a gap with no member live; equal neighbours merged.
    assert profile([(3, 5, 64)]) == [(3, 5, 64)]
    assert profile([(0, 1, 8), (4, 4, 8)]) == [(0, 1, 8), (2, 3, 0), (4, 4, 8)]
    assert profile([(0, 1, 8), (2, 3, 8)]) == [(0, 3, 8)]


def test_a_group_gives_its_upper_bytes_to_others_until_its_members_need_them():
    # By hand: steps 0-1 hold a (100) and x (100); steps 2-3 hold cat (200). Both 200.
    assert load(CONCAT) == 200
    # As one rectangle the group holds 200 bytes from step 0, and x needs 100 more.
    assert load(rigid(CONCAT)) == 300
    for name in names():
        result = plan(CONCAT, name)
        assert check_plan(CONCAT, result).ok, name
        if name not in ("naive", "bump"):
            assert result.arena_bytes == 200, name
        assert check_plan(CONCAT, plan(rigid(CONCAT), name)).ok, name  # a rigid plan stays valid
    exact = plan(CONCAT, "optimal")
    assert exact.stats["status"] == "optimal" and exact.stats["gap"] == 0.0
    rigid_exact = plan(rigid(CONCAT), "optimal")
    assert rigid_exact.arena_bytes == 300 and rigid_exact.stats["status"] == "optimal"


def _plan(problem, offsets: dict[str, int]) -> Plan:
    placed = {b.id: Placement("arena", offsets[b.id] if b.alias_of is None else 0) for b in problem.buffers}
    by_id = {b.id: b for b in problem.buffers}
    for b in problem.buffers:  # members sit at their root's offset plus their alias offsets
        at, c = 0, b
        while c.alias_of is not None:
            at += c.alias_offset
            c = by_id[c.alias_of]
        placed[b.id] = Placement("arena", offsets[c.id] + at)
    top = max(placed[b.id].offset + b.size for b in problem.buffers)
    return Plan("hand", placed, {"arena": top}, lower_bound=load(problem), naive=0)


def test_the_checker_refuses_bytes_a_live_member_still_needs():
    # x over the group's upper half while only slice a lives: valid.
    assert check_plan(CONCAT, _plan(CONCAT, {"cat": 0, "x": 100})).ok
    # x living one step longer, into step 2 where slice b holds those bytes: refused.
    longer = CONCAT.replace(buffers=(*CONCAT.buffers[:3], Buffer("x", 100, 0, 2)))
    result = check_plan(longer, _plan(longer, {"cat": 0, "x": 100}))
    assert not result.ok and "'b'" in str(result) and "'x'" in str(result)


def test_an_exact_plan_beats_the_rigid_optimum_by_a_hand_computed_amount():
    # Two concats in turn, each with an early low slice and a late high one, and two
    # temporaries that fit above the early slices only. By hand: with profiles the peak is
    # 300 at every step and reachable; rigid, each group is 300 tall throughout its span,
    # so each temporary (200, live with one group's early slice) goes on top: 500.
    problem = make_problem(
        [
            Buffer("c1", 300, 2, 3),
            Buffer("c1a", 100, 0, 2, alias_of="c1"),
            Buffer("c1b", 200, 2, 2, alias_of="c1", alias_offset=100),
            Buffer("t1", 200, 0, 1),
            Buffer("c2", 300, 6, 7),
            Buffer("c2a", 100, 4, 6, alias_of="c2"),
            Buffer("c2b", 200, 6, 6, alias_of="c2", alias_offset=100),
            Buffer("t2", 200, 4, 5),
        ]
    )
    exact = plan(problem, "optimal")
    assert check_plan(problem, exact).ok
    assert exact.arena_bytes == 300 == load(problem) and exact.stats["status"] == "optimal"
    assert plan(rigid(problem), "optimal").arena_bytes == 500 == load(rigid(problem))
    assert best_by_brute_force(problem, unit=100) == 300
    assert best_by_brute_force(rigid(problem), unit=100) == 500


# ---- random problems with aliases of varied sizes ------------------------------------------


def _roots(problem):
    by_id = {b.id: b for b in problem.buffers}
    out = {}
    for b in problem.buffers:
        at, c = 0, b
        while c.alias_of is not None:
            at += c.alias_offset
            c = by_id[c.alias_of]
        out[b.id] = (c.id, at)
    return out


def best_by_brute_force(problem, unit: int) -> int:
    """The smallest arena over every choice of group offsets (multiples of `unit`), found by
    trying each group at each offset in turn. At each step a group holds the bytes from its
    offset up to the furthest end of its members live then (a member of no bytes included:
    its end is still where the group reaches, and the arena must reach it too); a partial
    choice that clashes, or reaches the best arena so far, is not extended."""
    roots = _roots(problem)
    groups = sorted({r for r, _ in roots.values()})
    held = {}  # group -> [(step, height)] at the steps where it reaches above its offset
    for g in groups:
        ends = [(b.first, b.last, at + b.size) for b in problem.buffers for r, at in [roots[b.id]] if r == g]
        steps = [(t, max((e for f, z, e in ends if f <= t <= z), default=0)) for t in range(problem.steps)]
        held[g] = [(t, h) for t, h in steps if h]
    height = {g: max((h for _, h in held[g]), default=0) for g in groups}
    best = [sum(height.values()) + unit * len(groups)]  # above any packing the search meets
    taken: dict[int, list[tuple[int, int]]] = {t: [] for t in range(problem.steps)}

    def extend(k: int, top: int) -> None:
        if k == len(groups):
            best[0] = min(best[0], top)
            return
        g = groups[k]
        base = 0
        while base + height[g] < best[0]:
            if not any(base < e and s < base + h for t, h in held[g] for s, e in taken[t]):
                for t, h in held[g]:
                    taken[t].append((base, base + h))
                extend(k + 1, max(top, base + height[g]))
                for t, _ in held[g]:
                    taken[t].pop()
            if not height[g]:
                break
            base += unit

    extend(0, 0)
    return best[0]


@st.composite
def grouped_problems(draw, max_buffers=10, unit=1):
    """Random problems where many buffers alias an earlier one at varied offsets and sizes."""
    steps = draw(st.integers(1, 8))
    buffers = []
    for i in range(draw(st.integers(1, max_buffers))):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.integers(first, steps - 1))
        size = unit * draw(st.sampled_from([0, 1, 2, 3, 5, 8]))
        alias_of, offset = None, 0
        if buffers and draw(st.integers(0, 2)):
            target = draw(st.sampled_from(buffers))
            alias_of, offset = target.id, unit * draw(st.integers(0, 4))
        buffers.append(Buffer(f"b{i}", size, first, last, alias_of=alias_of, alias_offset=offset))
    return make_problem(buffers, steps=steps, alignment=draw(st.sampled_from([1, 1, unit])))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(problem=grouped_problems(max_buffers=14, unit=8))
@pytest.mark.parametrize("name", names())
def test_every_strategy_plans_groups_by_their_profiles_validly(name, problem):
    options = {"max_iterations": 20} if name == "hill_climb" else {}
    result = plan(problem, name, **options)
    assert check_plan(problem, result).ok, (name, str(check_plan(problem, result)))
    assert result.arena_bytes >= result.lower_bound == load(problem)
    if name == "optimal":
        bound = result.stats["proven_lower_bound"]
        assert bound >= load(problem) and result.arena_bytes <= bound * (1 + result.stats["gap"]) + 1e-9


@settings(max_examples=60, deadline=None, derandomize=True)
@given(problem=grouped_problems(max_buffers=5, unit=1))
def test_optimal_meets_the_brute_force_optimum_and_never_exceeds_rigid(problem):
    exact = plan(problem, "optimal", max_nodes=20_000)
    assert check_plan(problem, exact).ok
    assert exact.stats["status"] == "optimal"
    truth = best_by_brute_force(problem, unit=problem.alignment)
    assert exact.arena_bytes == truth
    assert truth <= best_by_brute_force(rigid(problem), unit=problem.alignment)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(problem=grouped_problems(max_buffers=6, unit=1))
@pytest.mark.parametrize("search", [CanonicalSearch, SkylineSearch])
def test_each_exact_search_packs_at_the_optimum_and_proves_nothing_lower(search, problem):
    blocks = Blocks.of(problem)
    sized = np.flatnonzero(blocks.size > 0)
    model = model_of(blocks, sized)
    if search is SkylineSearch and model.gaps:
        return  # the driver gives those to the canonical search alone
    truth = best_by_brute_force(problem, unit=problem.alignment)
    offsets = search(model, truth, search.order, node_limit=200_000).run()
    assert offsets is not None and model.height(offsets) <= truth
    placer = Placer(problem, blocks)
    every = np.zeros(len(blocks), dtype=np.int64)
    every[sized] = offsets
    placer.place_every(every)
    assert check_plan(problem, placer.plan(search.__name__, 0.0)).ok
    if truth > 0:
        assert search(model, truth - 1, search.order, node_limit=200_000).run() is None
