"""The placement engine's structures against brute force on random small problems.

The reference places blocks the plain way: for each block, every placed block live at a
common step, their byte ranges sorted, the gaps between them, the rule's gap. The engine
(segment tree of unions, lists at points, the first-use sweep) must give the same offsets,
whatever the cut between short and long blocks.
"""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.sweep
import planner.timeline
import planner.timeline_jit
from planner import Buffer, Problem
from planner.placement import Placer
from planner.sweep import sweep
from planner.timeline import Timeline, add, pick
from planner.treepaths import gather_path, nearest_marked_ancestor


def reference_pick(ranges: list[tuple[int, int]], size: int, align: int, best: bool) -> int:
    """Gaps of the union of `ranges`, lowest first; the rule's choice, else above all."""
    gaps, reach = [], 0
    for start, end in sorted(ranges):
        if start > reach:
            gaps.append((reach, start))
        reach = max(reach, end)
    fitting = [(s, e) for s, e in gaps if -(-s // align) * align + size <= e]
    if fitting:
        s, _ = min(fitting, key=lambda g: (g[1] - g[0], g[0])) if best else fitting[0]
        return -(-s // align) * align
    return -(-reach // align) * align


def reference_offsets(problem: Problem, order: list[int], rule: str) -> list[int]:
    bufs = problem.buffers
    placed: list[tuple[int, int]] = []  # (buffer, offset)
    offsets = [0] * len(bufs)
    for i in order:
        b = bufs[i]
        if b.size == 0:
            continue
        live = [(at, at + bufs[j].size) for j, at in placed if b.overlaps_in_time(bufs[j])]
        offsets[i] = reference_pick(live, b.size, problem.align_of(b), rule == "best")
        placed.append((i, offsets[i]))
    return offsets


@st.composite
def problems_and_orders(draw):
    steps = draw(st.integers(1, 40))
    n = draw(st.integers(1, 40))
    buffers = []
    for i in range(n):
        first = draw(st.integers(0, steps - 1))
        last = draw(st.one_of(st.integers(first, steps - 1), st.just(steps - 1)))
        size = draw(st.one_of(st.integers(1, 64), st.integers(0, 3000)))
        buffers.append(Buffer(f"t{i}", size, first, last, alignment=draw(st.sampled_from([None, None, 8, 32]))))
    problem = Problem(buffers=tuple(buffers), steps=steps, alignment=draw(st.sampled_from([1, 1, 16])))
    order = draw(st.permutations(range(n)))
    return problem, list(order)


@pytest.mark.parametrize("compiled", [False, True] if planner.timeline_jit.USE else [False])
@pytest.mark.parametrize("short", [0, 1, 3, planner.timeline.SHORT])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=problems_and_orders(), rule=st.sampled_from(["first", "best"]))
def test_engine_places_like_the_reference(compiled, short, case, rule):
    problem, order = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.timeline, "SHORT", short)  # read when a placer is made
        patch.setattr(planner.timeline_jit, "USE", compiled)  # the Python loop or the compiled one
        patch.setattr(planner.timeline_jit, "FROM_BLOCKS", 0)  # every run, however small
        placer = Placer(problem)
        single = Placer(problem)
        placer.place_all(order, rule=rule)
    assert placer.offset.tolist() == reference_offsets(problem, order, rule)
    # Placing one at a time (the path every multi-pool problem takes) agrees too.
    for i in order:
        single.place(i, rule)
    assert single.offset.tolist() == placer.offset.tolist()


@pytest.mark.parametrize("chunk", [1, 2, planner.sweep.CHUNK])
@settings(max_examples=100, deadline=None)
@given(case=problems_and_orders(), rule=st.sampled_from(["first", "best"]))
def test_first_use_sweep_places_like_the_reference(chunk, case, rule):
    problem, _ = case
    order = sorted(range(len(problem.buffers)), key=lambda i: (problem.buffers[i].first, i))
    facts = [(b.first, b.last, b.size, problem.align_of(b)) for b in (problem.buffers[i] for i in order)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.sweep, "CHUNK", chunk)  # small chunks split and merge often
        patch.setattr(planner.sweep, "FEW", 0 if chunk < 3 else planner.sweep.FEW)  # and widest gaps are read
        offsets, top = sweep(facts, rule == "best", 2**62)
    expected = reference_offsets(problem, order, rule)
    assert offsets == [expected[i] for i in order]
    assert top == max([o + problem.buffers[i].size for i, o in zip(order, offsets, strict=True)] + [0])


@settings(max_examples=200, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), max_size=12),
    size=st.integers(1, 80),
    align=st.sampled_from([1, 4, 16]),
    best=st.booleans(),
)
def test_pick_reads_gaps_like_the_reference(ranges, size, align, best):
    pairs = [(start, start + length) for start, length in ranges]
    flat = [x for pair in pairs for x in pair]
    expected = reference_pick(pairs, size, align, best)
    assert pick(flat, size, align, best) == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.timeline, "MANY", 0)  # the numpy reading, for queries meeting many ranges
        assert pick(flat, size, align, best) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 20)), max_size=15))
def test_union_merges_what_it_meets_or_touches(ranges):
    flat: list[int] = []
    covered: set[int] = set()
    for start, length in ranges:
        add(flat, start, start + length)
        covered.update(range(start, start + length))
    assert flat == sorted(flat) and len(set(flat)) == len(flat)  # disjoint, not touching
    assert {x for s, e in zip(flat[::2], flat[1::2], strict=True) for x in range(s, e)} == covered


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 20)), max_size=15), st.booleans())
def test_unions_of_a_table_take_bytes_as_add_does(ranges, as_arrays):
    # The occupancy's inlined insertions (one node, or several at once) against `add`, and
    # against the bytes covered; `_add_one` says when the bytes lay strictly inside a range.
    with pytest.MonkeyPatch.context() as patch:
        if as_arrays:
            patch.setattr(planner.timeline, "LONG", 0)  # lists become arrays at their first growth
        one: list = [None]
        each: list = [None, None]
        flat: list[int] = []
        covered: set[int] = set()
        for start, length in ranges:
            span = set(range(start, start + length))
            # Strictly inside a range (touching neither end): the one case it reports.
            inside = any(s < start and start + length < e for s, e in zip(flat[::2], flat[1::2], strict=True))
            assert planner.timeline._add_one(one, 0, start, start + length) == inside
            planner.timeline._add_each(each, [1, 0], start, start + length)
            add(flat, start, start + length)
            covered |= span
            assert list(one[0]) == list(each[0]) == list(each[1]) == flat
    assert {x for s, e in zip(flat[::2], flat[1::2], strict=True) for x in range(s, e)} == covered


def test_canonical_nodes_tile_a_range_with_maximal_nodes():
    rng = random.Random(0)
    first = [rng.randrange(0, 50) for _ in range(300)]
    last = [f + rng.randrange(0, 30) for f in first]
    timeline = Timeline(np.array(first), np.array(last), np.ones(300, dtype=bool))
    leaves = timeline.leaves
    for block in range(300):
        lo, hi = timeline.lo[block], timeline.hi[block]
        covered = []
        for node in timeline.canonical(block):
            level = leaves.bit_length() - node.bit_length()
            start = (node << level) - leaves
            covered += range(start, start + (1 << level))
            parent_start = ((node >> 1) << (level + 1)) - leaves
            assert not (lo <= parent_start and parent_start + (2 << level) - 1 <= hi)  # maximal
        assert covered == list(range(lo, hi + 1))


def test_path_gathering_reads_each_ancestor_once():
    """Against a set of ancestors walked one by one: nodes x and y and every ancestor of
    either, each once, also when one of x and y lies above the other."""
    leaves = 32
    marked = np.zeros(2 * leaves, dtype=bool)
    marked[[1, 2, 3, 5, 6, 11, 12, 22, 23, 45, 46, 50]] = True
    up = nearest_marked_ancestor(marked, leaves).tolist()
    own = [array("q", [node, node + 1]) if node % 2 else [node, node + 1] for node in range(2 * leaves)]
    for x in range(1, 2 * leaves):
        for y in range(1, 2 * leaves):
            expected: list[int] = []
            for start in (x, y):
                node = start
                while node:
                    expected.append(node)
                    node = up[node]
            found: list[int] = []
            unions: list = []
            gather_path(own, up, x, y, found, unions)
            read = found[::2] + [union[0] for union in unions]
            assert sorted(read) == sorted(set(expected))
            assert all(type(union) is array for union in unions)


def test_empty_blocks_sit_at_zero_and_take_no_bytes():
    problem = Problem(
        buffers=(Buffer("a", 8, 0, 2), Buffer("empty", 0, 0, 2, alignment=64), Buffer("b", 8, 1, 1)), steps=3
    )
    for rule in ("first", "best", "top"):
        placer = Placer(problem)
        placer.place_all([0, 1, 2], rule=rule)
        assert placer.offset.tolist() == [0, 0, 8] and placer.top == [16]


@pytest.mark.parametrize("rule", ["first", "best"])
def test_first_use_sweep_survives_its_union_emptied_many_times(rule):
    # 40 buffers one after the other: the live union empties before each one, more often
    # than the chunk bookkeeping's initial room (this crashed once).
    spans = [(i, i, 8 + i % 3, 1) for i in range(40)]
    offsets, top = sweep(spans, rule == "best", 1 << 60)
    assert offsets == [0] * 40 and top == 10
