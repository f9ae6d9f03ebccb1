"""eject against the independent checker, LOAD and the greedy plans it starts from, on band-like
problems: one-step buffers of a few sizes with small buffers that live several periods."""

from __future__ import annotations

import threading
import time

import numpy as np

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


def _busy(stop: threading.Event) -> None:
    """CPU load in this process: a Python loop and numpy sums that hold the cores the search runs on."""
    x = np.arange(200_000, dtype=np.float64)
    while not stop.is_set():
        sum(range(2_000))
        x.sum()


def test_eject_bounded_by_work_places_a_busy_machine_s_problem_as_a_quiet_one():
    """The bound is placements tried, not seconds: the same problem planned on an idle process and
    beside a thread that keeps the CPU busy gives the same offsets, and the cap never cut either."""
    problem = bands(30)
    quiet = planner.plan(problem, "eject", work=20_000)
    stop = threading.Event()
    busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
    busy.start()
    try:
        loaded = planner.plan(problem, "eject", work=20_000)
    finally:
        stop.set()
        busy.join()
    assert not quiet.stats["capped"] and not loaded.stats["capped"]
    assert quiet.stats["tried"] >= 20_000  # the work bound, not LOAD, ended it
    assert quiet.stats["tried"] == loaded.stats["tried"]  # a time bound stops the loaded run sooner
    assert quiet.offsets == loaded.offsets and quiet.arena_bytes == loaded.arena_bytes
    assert check_plan(problem, loaded).ok


def test_the_time_cap_still_stops_a_search_without_a_work_bound_and_says_so():
    problem = bands(30)
    started = time.perf_counter()
    result = planner.plan(problem, "eject", work=10**12, time_limit=0.3)
    assert time.perf_counter() - started < 3.0
    assert result.stats["capped"] and result.arena_bytes > load(problem)
    assert check_plan(problem, result).ok
    assert result.arena_bytes <= min(planner.plan(problem, s).arena_bytes for s in GREEDY)
