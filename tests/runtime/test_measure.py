"""Time and memory measured in separate runs: no timed run is traced by tracemalloc (which slows
numpy down), and bytes beside the arena come from a traced run. Observed from inside the loop:
an on_step hook records `tracemalloc.is_tracing()` at every step."""

from __future__ import annotations

import tracemalloc

import pytest

from runtime import Session, load_model, measure_runs
from tests.runtime.test_session import feeds, small_cnn


class Observer:
    """An on_step hook recording, per run, whether tracemalloc traced each step."""

    def __init__(self) -> None:
        self.runs: list[list[bool]] = []

    def __call__(self, index: int, total: int, name: str, seconds: float) -> None:
        if index == 0:
            self.runs.append([])
        self.runs[-1].append(tracemalloc.is_tracing())


@pytest.fixture
def session() -> Session:
    assert not tracemalloc.is_tracing()
    return Session(load_model(small_cnn(), dims={"N": 2})).prepare()


def test_a_run_is_timed_without_tracing_by_default(session):
    seen = Observer()
    session.run(feeds(), on_step=seen)
    assert seen.runs == [[False] * 8]
    stats = session.stats
    assert stats.measure == "time" and stats.traced is False and stats.outside_arena_bytes is None
    assert stats.seconds > 0 and len(stats.step_seconds) == 8


def test_a_memory_run_traces_and_stops_tracing_after(session):
    seen = Observer()
    session.run(feeds(), on_step=seen, measure="memory")
    assert seen.runs == [[True] * 8]
    assert session.stats.measure == "memory" and session.stats.traced is True
    assert session.stats.outside_arena_bytes is not None
    assert not tracemalloc.is_tracing()


def test_the_session_default_can_be_memory(session):
    traced = Session(session.graph, measure="memory").prepare()
    traced.run(feeds())
    assert traced.stats.outside_arena_bytes is not None
    with pytest.raises(ValueError, match=r"measure='both': accepted values are \('time', 'memory'\)"):
        traced.run(feeds(), measure="both")


def test_a_callers_own_tracing_is_kept_and_recorded(session):
    tracemalloc.start()
    try:
        session.run(feeds(), measure="memory")
        assert tracemalloc.is_tracing()  # not stopped: the caller started it
        session.run(feeds())
        assert session.stats.traced is True  # a timed run under the caller's tracing says so
    finally:
        tracemalloc.stop()


def test_measure_runs_traces_one_run_and_times_the_others_untraced(session):
    seen = Observer()
    measured = measure_runs(session, feeds(), repeat=3, on_step=seen)
    assert seen.runs == [[True] * 8] + [[False] * 8] * 3
    assert measured.outside_arena_bytes is not None and len(measured.seconds) == 3
    assert measured.median_seconds in measured.seconds and len(measured.step_seconds) == 8
    assert set(measured.outputs) == {"y"} and measured.outputs["y"].shape == (2, 10)
    assert session.stats.measure == "time"  # what is left on the session is a timed run's
    with pytest.raises(ValueError, match="repeat=0"):
        measure_runs(session, feeds(), repeat=0)
