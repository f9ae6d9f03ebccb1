"""The placement engine against a pairwise scan on training-like and network-like traces.

The oracle places blocks the slow, obvious way: for each block, every placed block live at
a common step (all of them compared with it), their byte ranges sorted, the gaps between
them, the rule's gap. The engine must give the same offsets for the orders the strategies
use, on traces small enough for the scan (up to 2,000 buffers), with its numpy reading of
big queries forced on every query (and every union an array) and left at its thresholds, and
through its compiled loop (`planner.timeline_jit`) where numba is installed.
"""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
import planner.sweep
import planner.timeline
import planner.timeline_jit
from planner.blocks import Blocks
from planner.generate import network_like, training_like
from planner.placement import Placer
from planner.problem import Problem
from planner.timeline import Timeline, add, pick_among
from tests.planner.test_engine_structures import reference_pick


def pairwise_offsets(problem: Problem, order: list[int], rule: str) -> list[int]:
    """Each buffer in `order` at the rule's gap among the placed buffers live with it."""
    bufs = problem.buffers
    first = np.array([b.first for b in bufs])
    last = np.array([b.last for b in bufs])
    size = np.array([b.size for b in bufs])
    placed = np.zeros(len(bufs), dtype=bool)
    offsets = np.zeros(len(bufs), dtype=np.int64)
    for i in order:
        if size[i] == 0:
            continue
        live = np.flatnonzero(placed & (first <= last[i]) & (last >= first[i]))
        ranges = [(int(offsets[j]), int(offsets[j] + size[j])) for j in live]
        offsets[i] = reference_pick(ranges, int(size[i]), problem.align_of(bufs[i]), rule == "best")
        placed[i] = True
    return offsets.tolist()


def by(*keys: np.ndarray) -> np.ndarray:
    """Indices sorted by the keys, most significant first, then by index (as strategies sort)."""
    return np.lexsort((np.arange(len(keys[0])), *reversed(keys)))


def orders(problem: Problem) -> dict[str, np.ndarray]:
    """The placing orders of the engine's strategies, and a random one."""
    placer = Placer(problem)
    b = placer.blocks
    length = b.last - b.first
    return {
        "size": by(-b.size, b.first),  # wic, greedy_by_size
        "lifetime": by(-length, -b.size),  # best_fit's temporal order
        "conflicts": by(-b.conflict_counts(), -b.size),  # greedy_by_conflicts
        "first_use": by(b.first),  # first_fit (the sweep)
        "random": np.random.default_rng(0).permutation(len(b)),
    }


TRACES = [
    training_like(2000, seed=0),
    training_like(1500, seed=3),
    network_like(2000, seed=1),
]


@pytest.mark.parametrize("problem", TRACES, ids=lambda p: p.name)
def test_engine_places_traces_like_the_pairwise_scan(problem):
    for name, order in orders(problem).items():
        for rule in ("first", "best"):
            expected = pairwise_offsets(problem, order.tolist(), rule)
            # The Python loop with its thresholds, with every query read by numpy (MANY 0) and
            # every union an array at once (LONG 0); then the compiled loop, where there is one.
            routes = [(0, 0, False), (planner.timeline.MANY, planner.timeline.LONG, False)]
            routes += [(planner.timeline.MANY, planner.timeline.LONG, True)] if planner.timeline_jit.USE else []
            for many, long, compiled in routes:
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(planner.timeline, "MANY", many)
                    patch.setattr(planner.timeline, "LONG", long)
                    patch.setattr(planner.timeline, "FEW", many)  # 0: every union query compiled, if it can be
                    patch.setattr(planner.timeline_jit, "USE", compiled)
                    patch.setattr(planner.timeline_jit, "FROM_BLOCKS", 0)  # every run, however small
                    placer = Placer(problem)
                    placer.place_all(order, rule=rule)
                assert placer.offset.tolist() == expected, (name, rule, many, compiled)


@pytest.mark.parametrize("short", [1, planner.timeline.SHORT])
def test_one_block_at_a_time_places_like_the_pairwise_scan(short):
    # Several pools take this path (queries through `Occupancy.taken`); one pool shows it.
    problem = training_like(600, seed=2)
    order = orders(problem)["size"]
    expected = pairwise_offsets(problem, order.tolist(), "best")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.timeline, "SHORT", short)
        placer = Placer(problem)
    for i in order.tolist():
        placer.place(i, "best")
    assert placer.offset.tolist() == expected


@pytest.mark.parametrize("chunk", [2, planner.sweep.CHUNK])
def test_first_use_sweep_places_a_training_trace_like_the_pairwise_scan(chunk):
    problem = training_like(2000, seed=4)
    order = orders(problem)["first_use"]
    for rule in ("first", "best"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(planner.sweep, "CHUNK", chunk)
            patch.setattr(planner.sweep, "FEW", 0)  # widest gaps read whatever the count
            placer = Placer(problem)
            placer.place_all(order, rule=rule)
        assert placer.offset.tolist() == pairwise_offsets(problem, order.tolist(), rule), rule


@pytest.mark.parametrize("strategy", ["first_fit", "wic", "greedy_by_size", "best_fit", "greedy_by_conflicts"])
def test_strategies_plan_a_training_trace_validly(strategy):
    problem = training_like(3000, seed=5)
    plan = planner.plan(problem, strategy)
    assert planner.check_plan(problem, plan).ok
    assert plan.pool_sizes["arena"] >= plan.lower_bound


@settings(max_examples=200, deadline=None)
@given(
    unions=st.lists(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), max_size=8), max_size=5),
    loose=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), max_size=6),
    size=st.integers(1, 80),
    align=st.sampled_from([1, 8, 32]),
    best=st.booleans(),
    many=st.sampled_from([0, 1024]),
)
def test_pick_among_unions_and_loose_ranges_reads_gaps_like_the_reference(unions, loose, size, align, best, many):
    kept: list[list[int] | array] = []
    for ranges in unions:
        union = array("q")
        for start, length in ranges:
            add(union, start, start + length)
        if union:
            kept.append(union if len(union) % 4 else list(union))  # short unions are lists
    flat = [x for start, length in loose for x in (start, start + length)]
    every = [(s, e) for union in kept for s, e in zip(union[::2], union[1::2], strict=True)]
    every += [(start, start + length) for start, length in loose]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner.timeline, "MANY", many)
        assert pick_among(kept, flat, size, align, best) == reference_pick(every, size, align, best)
    for union in kept:  # still growable: no numpy view of it was left behind
        add(union, 10_000, 10_001)


@pytest.mark.skipif(not planner.timeline_jit.USE, reason="numba is not installed")
@pytest.mark.parametrize("problem", [training_like(12_000, seed=5), network_like(12_000, seed=6)], ids=lambda p: p.name)
def test_compiled_loop_places_big_traces_like_the_python_loop(problem):
    # Past FROM_BLOCKS the compiled loop is the default route: the Python loop is the oracle.
    assert len(problem.buffers) >= planner.timeline_jit.FROM_BLOCKS
    blocks = Blocks.of(problem)
    for name, order in orders(problem).items():
        for rule in ("first", "best"):
            timeline = Timeline(blocks.first, blocks.last, blocks.size > 0)
            ran = planner.timeline_jit.run(
                timeline, order, blocks.size[order], blocks.align[order], rule == "best", 1 << 62
            )
            assert ran is not None
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(planner.timeline_jit, "USE", False)
                placer = Placer(problem)
                placer.place_all(order, rule=rule)
            assert ran == (placer.offset[order].tolist(), placer.top[0]), (name, rule)
