"""Lifetime analysis: from a neutral schedule to live ranges, and the live bytes they make."""

from __future__ import annotations

import pytest

from planner import (
    ProblemError,
    Schedule,
    Step,
    live_bytes,
    load,
    problem_from_schedule,
)

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
