"""Packing in pieces (`planner.exact.pieces`) and what `optimal` and `best` make of it at
scale: plans checked by the independent checker, never worse than the greedy strategies,
and bounds and gaps against figures computed here on their own (LOAD, a brute force)."""

from __future__ import annotations

import random
import time

import pytest

from planner import Buffer, Problem, check_plan, load, make_problem, plan
from planner.csvio import load_csv
from planner.exact.pieces import pack, split
from planner.generate import network_like, training_like
from planner.placement import Blocks, Placer
from planner.strategies.heuristics import HEURISTICS, peak_stack

from .test_optimal import TRACES, brute_force


def random_problem(seed: int, n: int = 60) -> Problem:
    rng = random.Random(seed)
    steps = rng.randint(5, 40)
    buffers = []
    for i in range(n):
        first = rng.randint(0, steps - 1)
        last = min(steps - 1, first + rng.choice([0, 0, 1, 2, 5, steps]))
        buffers.append(Buffer(f"b{i}", rng.choice([0, 8, 24, 100, 512]), first, last))
    return Problem(buffers=tuple(buffers), steps=steps)


@pytest.mark.parametrize("seed", range(30))
def test_split_matches_its_definitions_pair_by_pair(seed):
    problem = random_problem(seed)
    blocks = Blocks.of(problem)
    parts = split(blocks)
    bufs = problem.buffers
    sized = [i for i, b in enumerate(bufs) if b.size > 0]
    everywhere = set(parts.everywhere.tolist())
    for i in sized:
        meets_all = all(bufs[i].overlaps_in_time(bufs[j]) for j in sized)
        covers = bufs[i].first <= min(bufs[j].first for j in sized) and bufs[i].last >= max(bufs[j].last for j in sized)
        assert (i in everywhere) == covers and (not covers or meets_all)
        assert (parts.piece[i] < 0) == (i in everywhere)
    rest = [i for i in sized if i not in everywhere]
    for i in rest:
        for j in rest:
            if bufs[i].overlaps_in_time(bufs[j]):
                assert parts.piece[i] == parts.piece[j]
    # Pieces are as small as that allows: each piece's steps are one unbroken stretch.
    for k in range(parts.count):
        mine = [bufs[i] for i in rest if parts.piece[i] == k]
        covered = set()
        for b in mine:
            covered |= set(range(b.first, b.last + 1))
        assert covered == set(range(min(covered), max(covered) + 1))
    assert all(parts.piece[i] == -1 for i, b in enumerate(bufs) if b.size == 0)


@pytest.mark.parametrize("seed", range(30))
def test_packing_is_valid_and_bounded_by_load(seed):
    problem = random_problem(seed)
    blocks = Blocks.of(problem)
    found = pack(problem, blocks, time.perf_counter() + 60, search=True, max_nodes=2000)
    placer = Placer(problem, blocks)
    placer.place_every(found.offsets)
    result = placer.plan("pieces", 0.0)
    assert check_plan(problem, result).ok
    assert result.arena_bytes == found.arena >= found.bound >= load(problem)


def _hard_piece_among_many(global_size: int) -> tuple[Problem, int]:
    """Two aligned buffers live together (LOAD 20, but 74 bytes at 64-byte alignment), 3,001
    one-buffer pieces after them, and two buffers live throughout. Returns the problem and
    the smallest arena, from a brute force of the hard piece plus the two stacked."""
    hard = [Buffer("h1", 10, 0, 1, alignment=64), Buffer("h2", 10, 1, 2, alignment=64), Buffer("h3", 4, 2, 2)]
    filler = [Buffer(f"f{i}", 8, 3 + i, 3 + i) for i in range(3001)]
    steps = 3 + len(filler)
    stacked = [Buffer(f"g{i}", global_size, 0, steps - 1) for i in range(2)]
    piece = brute_force(make_problem(hard))
    return Problem(buffers=tuple(hard + filler + stacked), steps=steps), piece + 2 * global_size


def test_optimal_at_scale_proves_a_bound_above_load_on_the_highest_piece():
    problem, smallest = _hard_piece_among_many(128)
    result = plan(problem, "optimal", time_limit=60.0)
    assert check_plan(problem, result).ok
    assert smallest > load(problem)  # the alignment makes LOAD unreachable
    assert result.arena_bytes == smallest
    assert result.stats["proven_lower_bound"] == smallest and result.stats["status"] == "optimal"
    assert result.stats["gap"] == 0.0 and result.stats["pieces_proven"] == 1


def test_stacked_bytes_that_break_alignment_leave_the_bound_at_load():
    # 100-byte stacked buffers: closing them up would move the 64-aligned ones off alignment.
    problem, smallest = _hard_piece_among_many(100)
    result = plan(problem, "optimal", time_limit=60.0)
    assert check_plan(problem, result).ok
    assert result.stats["proven_lower_bound"] == load(problem) < result.arena_bytes
    assert result.stats["status"] == "feasible"
    assert result.stats["gap"] == pytest.approx(result.arena_bytes / load(problem) - 1, abs=1e-6)


@pytest.mark.parametrize("make", [lambda: network_like(4000, seed=3), lambda: training_like(4000, seed=2)])
def test_optimal_at_scale_is_never_worse_than_a_heuristic_and_states_its_gap(make):
    problem = make()
    result = plan(problem, "optimal", time_limit=120.0)
    assert check_plan(problem, result).ok
    for name in HEURISTICS:  # a time limit this long lets every one of them run
        assert result.arena_bytes <= plan(problem, name).arena_bytes, name
    bound = result.stats["proven_lower_bound"]
    assert bound >= load(problem)
    assert result.stats["gap"] == pytest.approx(result.arena_bytes / bound - 1, abs=1e-6)
    assert (result.stats["status"] == "optimal") == (result.arena_bytes == bound)


def test_best_at_scale_stacks_what_lives_throughout_and_reports_its_gap_to_load():
    problem = network_like(5000, seed=4)
    result = plan(problem, "best", time_limit=120.0)
    assert check_plan(problem, result).ok
    assert result.arena_bytes <= min(plan(problem, name).arena_bytes for name in HEURISTICS)
    assert result.stats["gap_to_load"] == pytest.approx(result.arena_bytes / load(problem) - 1, abs=1e-6)
    assert result.stats["tried"][result.stats["winner"]] == result.arena_bytes


def test_optimal_on_a_small_problem_is_never_worse_than_a_heuristic_even_with_no_budget():
    problem = network_like(300, seed=7)
    result = plan(problem, "optimal", max_nodes=1, time_limit=60.0)
    assert check_plan(problem, result).ok
    assert result.arena_bytes <= min(plan(problem, name).arena_bytes for name in HEURISTICS)
    assert result.stats["gap"] == pytest.approx(result.arena_bytes / result.stats["proven_lower_bound"] - 1, abs=1e-6)


@pytest.mark.parametrize("strategy", ["optimal", "best"])
def test_alias_groups_at_scale_stay_one_block(strategy):
    base = network_like(4000, seed=5)
    bufs = list(base.buffers)
    aliases = [
        Buffer(f"al{k}", max(1, bufs[k].size // 2), bufs[k].first, bufs[k].last, alias_of=bufs[k].id, alias_offset=64)
        for k in range(0, 3000, 7)
    ]
    problem = Problem(buffers=tuple(bufs + aliases), steps=base.steps)
    result = plan(problem, strategy, time_limit=60.0)
    assert check_plan(problem, result).ok
    for alias in aliases:
        assert result.offset(alias.id) == result.offset(alias.alias_of) + 64
    assert result.arena_bytes <= plan(problem, "greedy_by_size").arena_bytes


def test_a_greedy_plan_taken_over_the_search_is_labelled_by_its_own_gap():
    # With one search node, the heuristics (and the peak stack) beat the search's incumbent on
    # both problems: greedy_by_breadth reaches LOAD on the IOPDDL trace (proven optimal), not
    # on the other.
    cases = [(network_like(300, seed=7), "feasible")]
    trace = TRACES / "iopddl_G_1.csv"
    if trace.exists():
        cases.append((load_csv(trace), "optimal"))
    for problem, status in cases:
        result = plan(problem, "optimal", max_nodes=1, time_limit=60.0)
        assert check_plan(problem, result).ok
        assert result.stats["start"] in (*HEURISTICS, "peak_stack") and result.stats["status"] == status
        greedy = [plan(problem, name).arena_bytes for name in HEURISTICS] + [peak_stack(problem).arena_bytes]
        assert result.arena_bytes == min(greedy)
        assert (result.arena_bytes == load(problem)) == (status == "optimal")


def test_optimal_at_scale_takes_the_peak_stack_when_it_reaches_load():
    # Past the search's reach the peak stack comes first: at LOAD it is proven optimal at once.
    problem = network_like(10_000, seed=0)
    stacked = peak_stack(problem)
    assert stacked.arena_bytes == load(problem)  # the bound is met, so the answer is proven
    result = plan(problem, "optimal", time_limit=30.0)
    assert check_plan(problem, result).ok and result.arena_bytes == load(problem)
    assert result.stats["start"] == "peak_stack" and result.stats["status"] == "optimal" and result.stats["gap"] == 0.0
