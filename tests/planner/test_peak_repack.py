"""The repack around the peak step (`planner.strategies.heuristics.peak_repack`) and what
`best` and `optimal` make of it: plans checked by the independent checker and measured
against LOAD, worked out by hand where the problem is small."""

from __future__ import annotations

import random

import pytest

from planner import Buffer, Pool, Problem, check_plan, load, plan
from planner.placement import Blocks
from planner.strategies.best import LARGE_BLOCKS
from planner.strategies.heuristics import HEURISTICS, peak_repack, peak_stack
from planner.strategies.optimal import MAX_SEARCH_BLOCKS

# Live bytes per step: 80, 80, 112, 160, 272, 208, 272, 272, so LOAD is 272, first at step 4
# where b0, b1 and b3 are live.
HOLE = {"b0": (128, 3, 7), "b1": (32, 2, 5), "b2": (48, 5, 7), "b3": (112, 4, 4), "b4": (96, 6, 7), "b5": (80, 0, 2)}


def hole_problem() -> Problem:
    return Problem(buffers=tuple(Buffer(n, s, a, b) for n, (s, a, b) in HOLE.items()), steps=8)


def test_the_repack_closes_the_hole_greedy_leaves_at_the_peak():
    problem = hole_problem()
    assert load(problem) == 272
    # greedy_by_size: b0 at 0, b3 at 128, b4 at 128, b5 at 0, b2 at 224, and b1 (live with
    # all of them) at 272: 304 bytes, with [240, 272) empty at step 4.
    greedy = plan(problem, "greedy_by_size")
    assert greedy.arena_bytes == 304 and greedy.offset("b1") == 272
    assert min(plan(problem, name).arena_bytes for name in HEURISTICS) > 272
    assert peak_stack(problem).arena_bytes > 272
    # Closed up in greedy's order: b0, b3, b1 at 0, 128, 240. Then by first use, best fit:
    # b5 in [0, 240) at 0; b2 (live with b0 and b1) in [128, 240) at 128; b4 above b2 at 176.
    result = peak_repack(problem, Blocks.of(problem).offsets_in(greedy), start="greedy_by_size")
    assert result is not None and check_plan(problem, result).ok
    assert result.arena_bytes == 272
    assert {b: result.offset(b) for b in HOLE} == {"b0": 0, "b3": 128, "b1": 240, "b5": 0, "b2": 128, "b4": 176}
    assert result.stats["order"] == "first_use" and result.stats["rule"] == "best"
    assert result.stats["start"] == "greedy_by_size" and result.stats["peak_step"] == 4
    assert result.stats["peak_blocks"] == 3


def random_problem(seed: int) -> Problem:
    rng = random.Random(seed)
    steps = rng.randint(3, 30)
    buffers: list[Buffer] = []
    for i in range(rng.randint(5, 60)):
        first = rng.randrange(steps)
        last = min(steps - 1, first + rng.choice([0, 1, 3, steps]))
        aligned = rng.choice([None, None, 16, 64])
        buffers.append(Buffer(f"b{i}", rng.choice([0, 8, 24, 100, 512]), first, last, alignment=aligned))
        if i and rng.random() < 0.15:  # an in-place successor: a block whose height changes
            root = buffers[rng.randrange(i)]
            if root.alias_of is None and root.last + 1 < steps:
                end = rng.randint(root.last + 1, steps - 1)
                buffers.append(Buffer(f"a{i}", max(1, root.size // 2), root.last, end, alias_of=root.id))
    return Problem(buffers=tuple(buffers), steps=steps, alignment=rng.choice([1, 8]))


@pytest.mark.parametrize("seed", range(40))
def test_every_repack_is_a_valid_plan_with_the_peak_closed_up(seed):
    problem = random_problem(seed)
    blocks = Blocks.of(problem)
    for name in ("first_fit", "greedy_by_size", "best_fit"):
        start = plan(problem, name)
        result = peak_repack(problem, blocks.offsets_in(start), blocks, start=name)
        assert result is not None
        report = check_plan(problem, result)
        assert report.ok, report.violations[:3]
        step = result.stats["peak_step"]
        peak = [i for i in range(len(blocks)) if blocks.first[i] <= step <= blocks.last[i] and blocks.size[i]]
        # No higher at that step than the blocks stacked in the order of their offsets in the
        # start plan, each aligned: a block may only go lower, into padding or under a profile.
        stacked = sorted(peak, key=lambda i: (start.offset(blocks.ids[i]), int(blocks.first[i]), i))
        height = 0
        for i in stacked:
            height = -(-height // int(blocks.align[i])) * int(blocks.align[i]) + int(blocks.size[i])
        ends = [result.offset(blocks.ids[i]) + int(blocks.size[i]) for i in peak]
        assert max(ends, default=0) <= height
        if not blocks.profiles and all(a == 1 for a in blocks.align.tolist()):
            # Nothing to pad: the blocks live at the peak fill [0, their sum) exactly.
            assert max(ends, default=0) == sum(int(blocks.size[i]) for i in peak)


def test_several_pools_or_no_room_give_no_repack():
    problem = hole_problem()
    greedy = plan(problem, "greedy_by_size")
    offsets = Blocks.of(problem).offsets_in(greedy)
    two_pools = Problem(buffers=problem.buffers, steps=problem.steps, pools=(Pool("a"), Pool("b")))
    assert peak_repack(two_pools, offsets) is None
    tight = problem.with_capacity(271)  # below LOAD: no placement fits
    assert peak_repack(tight, offsets) is None
    assert peak_repack(problem.with_capacity(272), offsets).arena_bytes == 272


def scaled_copies(copies: int = 388) -> Problem:
    """A problem past `LARGE_BLOCKS` and the search's reach whose highest part is a repack's:
    eight blocks, then copies of them at half the size later on, and one small block live
    at every step but the last, so that no cut line splits the problem into pieces."""
    base = [(256, 1, 1), (96, 2, 6), (32, 6, 6), (32, 7, 7), (64, 0, 4), (160, 2, 2), (224, 7, 7), (32, 3, 7)]
    buffers = [
        Buffer(f"b{k}.{c}", size if c == 0 else size // 2, first + 8 * c, last + 8 * c)
        for c in range(copies)
        for k, (size, first, last) in enumerate(base)
    ]
    buffers.append(Buffer("spine", 16, 0, 8 * copies - 2))
    return Problem(buffers=tuple(buffers), steps=8 * copies)


@pytest.mark.parametrize("strategy", ["best", "optimal"])
def test_best_and_optimal_at_scale_take_the_repack_to_load(strategy):
    problem = scaled_copies()
    assert len(Blocks.of(problem)) > max(LARGE_BLOCKS, MAX_SEARCH_BLOCKS)  # the paths at scale
    floor = load(problem)
    assert min(plan(problem, name).arena_bytes for name in HEURISTICS) > floor
    assert peak_stack(problem).arena_bytes > floor
    result = plan(problem, strategy, time_limit=60.0)
    assert check_plan(problem, result).ok and result.arena_bytes == floor
    if strategy == "best":
        assert result.stats["winner"] == "peak_repack"
        assert any(k.startswith("peak_repack of ") and v == floor for k, v in result.stats["tried"].items())
    else:
        assert result.stats["start"] == "peak_repack" and result.stats["status"] == "optimal"
        assert result.stats["gap"] == 0.0
