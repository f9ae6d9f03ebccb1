"""tile_auto's repair is bounded by work, not by seconds: a tiled stage's problem places the same on
a busy process as on a quiet one, and a repair the safety cap cuts is named in the tiling's note."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import planner
from runtime import MemoryOptions, load_model, memory_problem
from runtime.tiling import chains, tile_auto, tiled_graph
from runtime.tiling import search as tiling_search
from tests.runtime.tflite.shared import model_path

ACTIVATIONS = MemoryOptions(io="external", workspace=False)


@pytest.fixture(scope="module")
def person_detect():
    return load_model(model_path("person_detect"))


def _busy(stop: threading.Event) -> None:
    x = np.arange(200_000, dtype=np.float64)
    while not stop.is_set():
        sum(range(2_000))
        x.sum()


def test_a_stage_repaired_beside_a_busy_thread_gets_the_offsets_of_a_quiet_run(person_detect):
    chain = next(c for c in chains(person_detect) if len(c.nodes) == 8)
    problem = memory_problem(tiled_graph(person_detect, chain, 1, "stripes"), ACTIVATIONS)
    work = 20_000  # ends on this bound, above LOAD: where a time bound would stop elsewhere
    quiet = planner.plan(problem, tiling_search.REPAIR, work=work)
    stop = threading.Event()
    busy = threading.Thread(target=_busy, args=(stop,), daemon=True)
    busy.start()
    try:
        loaded = planner.plan(problem, tiling_search.REPAIR, work=work)
    finally:
        stop.set()
        busy.join()
    assert quiet.arena_bytes > quiet.lower_bound and quiet.stats["tried"] >= work
    assert not quiet.stats["capped"] and not loaded.stats["capped"]
    assert quiet.offsets == loaded.offsets
    assert planner.check_plan(problem, loaded).ok


def test_a_repair_cut_by_the_time_cap_is_named_in_the_note(person_detect, monkeypatch):
    monkeypatch.setattr(tiling_search, "REPAIR_SECONDS", 0.0)
    tiling = tile_auto(person_detect, ACTIVATIONS, slack=0.0)
    assert "stopped at its time cap" in tiling.note, tiling.note
    assert tiling.chosen is not None and (tiling.chosen.arena_bytes or 0) < tiling.arena_bytes_untiled


def test_a_search_cut_by_its_time_limit_says_so_and_plans_no_larger_than_untiled(person_detect):
    """With no time at all the search stops before it scores a head: the model plans untiled, and
    the note says the limit stopped it rather than that nothing tileable lowers the arena."""
    tiling = tile_auto(person_detect, ACTIVATIONS, time_limit=0.0)
    assert "stopped at the time limit (0 s)" in tiling.note, tiling.note
    assert tiling.chosen is None and tiling.graph is person_detect
    unlimited = tile_auto(person_detect, ACTIVATIONS)
    assert "time limit" not in unlimited.note, unlimited.note
