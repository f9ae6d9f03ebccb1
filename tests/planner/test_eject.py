"""eject against the independent checker, LOAD and the greedy plans it starts from, on band-like
problems: one-step buffers of a few sizes with small buffers that live several periods."""

from __future__ import annotations

import planner
from planner import Buffer, check_plan, load, make_problem

GREEDY = ("wic", "greedy_by_size", "greedy_by_conflicts")


def bands(count: int, period: int = 4, carry: int = 2) -> planner.Problem:
    """`count` bands of `period` one-step buffers, each band also starting a small buffer that
    lives `carry` bands (the rows a later band reads again)."""
    big, small = (96, 64, 128, 80), (8, 12)
    buffers = []
    for k in range(count):
        base = k * period
        buffers += [Buffer(f"t{k}_{j}", big[(k + j) % len(big)], base + j, base + j) for j in range(period)]
        buffers.append(Buffer(f"r{k}", small[k % 2], base + 1, min(base + 1 + carry * period, count * period - 1)))
    return make_problem(buffers, alignment=4)


def test_eject_places_below_every_greedy_plan_it_starts_from_and_the_checker_accepts_it():
    problem = bands(10)
    greedy = min(planner.plan(problem, s).arena_bytes for s in GREEDY)
    result = planner.plan(problem, "eject", max_moves=1000, time_limit=30.0)
    assert check_plan(problem, result).ok, str(check_plan(problem, result))
    assert load(problem) <= result.arena_bytes < greedy


def test_without_moves_eject_is_the_smallest_of_its_greedy_plans():
    problem = bands(12, carry=3)
    result = planner.plan(problem, "eject", max_moves=0)
    assert check_plan(problem, result).ok
    assert result.arena_bytes == min(planner.plan(problem, s).arena_bytes for s in GREEDY)


def test_eject_is_reproducible_for_a_seed_and_a_move_budget():
    problem = bands(16)
    runs = [planner.plan(problem, "eject", max_moves=100, time_limit=30.0, seed=3) for _ in range(2)]
    assert runs[0].offsets == runs[1].offsets
    assert runs[0].stats["moves"] == runs[1].stats["moves"]


def test_eject_stops_at_load_without_a_move():
    problem = bands(6, carry=3)  # the greedy plans reach LOAD here
    assert min(planner.plan(problem, s).arena_bytes for s in GREEDY) == load(problem)
    result = planner.plan(problem, "eject")
    assert result.arena_bytes == load(problem) and result.stats["moves"] == 0
    assert result.stats["reached_lower_bound"]
