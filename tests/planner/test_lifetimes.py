"""Lifetime analysis from a neutral schedule, LOAD, and the placement engine's gap rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import (
    Buffer,
    ProblemError,
    Schedule,
    Step,
    check_plan,
    live_bytes,
    load,
    make_problem,
    plan,
    problem_from_schedule,
)
from planner.bounds import live_segments, peak_step
from planner.placement import Placer

# x -> conv(ws) -> y -> relu -> z -> add(x, z) -> out
SCHEDULE = Schedule(
    steps=[
        Step("conv", reads=("x",), writes=("y",), scratch=("conv::ws",)),
        Step("relu", reads=("y",), writes=("z",)),
        Step("add", reads=("x", "z"), writes=("out",)),
        Step("log", reads=("z",), writes=("unused",)),
    ],
    sizes={"x": 100, "y": 200, "z": 200, "out": 100, "conv::ws": 50, "unused": 7},
    inputs=("x",),
    outputs=("out",),
    kinds={"conv::ws": "workspace"},
)


def test_live_ranges_follow_the_rules():
    problem = problem_from_schedule(SCHEDULE)
    ranges = {b.id: (b.first, b.last, b.kind) for b in problem.buffers}
    assert ranges == {
        "x": (0, 2, "input"),  # from step 0 to its last reader
        "conv::ws": (0, 0, "workspace"),  # exactly one step
        "y": (0, 1, "activation"),
        "z": (1, 3, "activation"),
        "out": (2, 3, "output"),  # pinned to the last step
        "unused": (3, 3, "activation"),  # written, never read: its own step
    }
    assert problem.step_names == ("conv", "relu", "add", "log")


def test_live_bytes_and_load():
    problem = problem_from_schedule(SCHEDULE)
    # step 0: x y ws = 350; 1: x y z = 500; 2: x z out = 400; 3: z out unused = 307
    assert live_bytes(problem).tolist() == [350, 500, 400, 307]
    assert load(problem) == 500


def test_reading_before_writing_is_an_error():
    bad = Schedule(steps=[Step("a", reads=("ghost",), writes=("y",))], sizes={"y": 1})
    with pytest.raises(ProblemError, match="reads 'ghost' before any step writes it"):
        problem_from_schedule(bad)


def test_output_never_written_is_an_error():
    bad = Schedule(steps=[Step("a", writes=("y",))], sizes={"y": 1}, outputs=("z",))
    with pytest.raises(ProblemError, match="graph output 'z' is never written"):
        problem_from_schedule(bad)


def test_excluded_buffers_stay_out():
    schedule = Schedule(
        steps=SCHEDULE.steps, sizes=SCHEDULE.sizes, inputs=("x",), outputs=("out",), excluded=frozenset({"x"})
    )
    assert "x" not in {b.id for b in problem_from_schedule(schedule).buffers}


def test_first_fit_takes_the_lowest_gap_best_fit_the_tightest():
    # Placed and live at step 0: [0,2) [8,10) [14,20); free gaps: [2,8) of 6 and [10,14) of 4.
    problem = make_problem([Buffer("a", 2, 0, 0), Buffer("b", 2, 0, 0), Buffer("c", 6, 0, 0), Buffer("new", 4, 0, 0)])
    placer = Placer(problem)
    for block, offset in ((0, 0), (1, 8), (2, 14)):
        placer.place_at(block, 0, offset)
    assert placer.choose(3, 0, "first") == 2
    assert placer.choose(3, 0, "best") == 10
    assert placer.choose(3, 0, "top") == 20


def test_gap_search_respects_alignment():
    problem = make_problem([Buffer("a", 3, 0, 0), Buffer("b", 100, 0, 0), Buffer("new", 4, 0, 0, alignment=8)])
    placer = Placer(problem)
    placer.place_at(0, 0, 0)
    placer.place_at(1, 0, 12)
    # The gap [3, 12) holds 4 bytes only from an aligned start of 8.
    assert placer.choose(2, 0, "first") == 8


@settings(max_examples=150, deadline=None)
@given(
    steps=st.integers(1, 30),
    raw=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29), st.integers(0, 100)), max_size=20),
)
def test_load_and_peak_from_segments_agree_with_the_per_step_curve(steps, raw):
    buffers = [
        Buffer(f"b{i}", size, min(a, b) % steps, min(a, b) % steps + abs(a - b) % (steps - min(a, b) % steps))
        for i, (a, b, size) in enumerate(raw)
    ]
    problem = make_problem(buffers, steps=steps)
    curve = live_bytes(problem)
    assert load(problem) == int(curve.max())
    assert peak_step(problem) == int(curve.argmax())
    starts, values = live_segments(problem)
    assert np.array_equal(np.repeat(values, np.diff(np.append(starts, steps))), curve)


def test_a_trillion_steps_plan_without_a_per_step_array():
    problem = make_problem(
        [Buffer("a", 8, 0, 10**12 - 1), Buffer("b", 8, 5, 10**11), Buffer("c", 8, 10**11 + 1, 10**12 - 1)]
    )
    assert load(problem) == 16 and peak_step(problem) == 5
    result = plan(problem, "greedy_by_size")
    assert check_plan(problem, result).ok and result.arena_bytes == 16
    with pytest.raises(ProblemError, match="too many for a per-step curve"):
        live_bytes(problem)
