"""Placing a tiled stage: a row that a later band reads is not linked in place onto a band's
one-step tile, so the stage places near its LOAD (the lower bound is the oracle, the checker
judges every plan), and the runs stay right: float against onnxruntime and the untiled run,
int8 bit for bit against the untiled run (itself checked against TensorFlow Lite Micro in
test_tiling_int), with the canary on."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import planner
import runtime.problem
from planner.bounds import load
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import chains, tile_auto, tiled_graph
from runtime.tiling.search import SEARCH_STRATEGIES
from runtime.training.models import mobilenet_v2_like
from tests.runtime.kernels.harness import close
from tests.runtime.tflite.shared import model_path

ACTIVATIONS = MemoryOptions(io="external", workspace=False)


@pytest.fixture(scope="module")
def model():
    return mobilenet_v2_like(size=48, width=0.35, classes=10)


@pytest.fixture(scope="module")
def stage(model):
    """MobileNetV2's head through its first stride-2 block, in one-row stripes."""
    graph = load_model(model)
    chain = next(c for c in chains(graph) if len(c.nodes) == 12)
    return graph, tiled_graph(graph, chain, 1, "stripes")


def _pinned_problem(tiled, monkeypatch):
    """The problem as it was built before: every in-place link kept."""
    with monkeypatch.context() as patch:
        patch.setattr(runtime.problem, "_tiled", lambda graph: False)
        return memory_problem(tiled, ACTIVATIONS)


def test_a_tiled_stage_places_near_its_load_where_the_pinned_rows_did_not(stage, monkeypatch):
    _, tiled = stage
    problem = memory_problem(tiled, ACTIVATIONS)
    before = _pinned_problem(tiled, monkeypatch)
    links = {b.id for b in problem.buffers if b.alias_of}
    dropped = {b.id for b in before.buffers if b.alias_of} - links
    assert dropped and all("@" in name for name in dropped)  # only tiles of the stage lose a link
    assert load(problem) == load(before)  # the links saved no bytes at the peak
    for strategy in ("greedy_by_size", "wic"):
        plan, old = planner.plan(problem, strategy), planner.plan(before, strategy)
        assert planner.check_plan(problem, plan).ok and planner.check_plan(before, old).ok
        assert plan.arena_bytes <= 1.15 * load(problem) < old.arena_bytes, strategy


def test_the_stage_without_those_links_runs_to_onnxruntimes_outputs_with_the_canary_on(model, stage):
    graph, tiled = stage
    image = np.random.default_rng(5).standard_normal((1, 3, 48, 48)).astype(np.float32)
    got = Session(tiled, "wic", ACTIVATIONS, canary=True).prepare().run({"x": image})
    untiled = Session(graph, "wic", ACTIVATIONS).prepare().run({"x": image})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": image})
    close([next(iter(got.values()))], [want], rtol=1e-4, atol=1e-5, what="tiled against onnxruntime")
    # The untiled run takes other routes (Winograd on whole maps, where bands take im2col): two float32
    # computations of the graph, held to the same tolerance as against onnxruntime.
    close([next(iter(got.values()))], [next(iter(untiled.values()))], rtol=1e-4, atol=1e-5, what="against untiled")


def test_tile_auto_places_its_candidates_by_several_strategies_and_is_never_larger_than_untiled(model):
    graph = load_model(model)
    tiling = tile_auto(graph, ACTIVATIONS)
    assert tiling.chosen is not None, tiling.note
    tiled = memory_problem(tiling.graph, ACTIVATIONS)
    arenas = [planner.plan(tiled, s).arena_bytes for s in SEARCH_STRATEGIES]
    assert SEARCH_STRATEGIES[0] == "greedy_by_size"
    assert tiling.chosen.arena_bytes == min(arenas) and tiling.chosen.arena_first == arenas[0]
    untiled = planner.plan(memory_problem(graph, ACTIVATIONS), "greedy_by_size").arena_bytes
    assert arenas[0] < untiled == tiling.arena_bytes_untiled


def test_an_int8_stage_without_those_links_equals_the_untiled_run_bit_for_bit(monkeypatch):
    pytest.importorskip("tflite_micro")
    graph = load_model(model_path("person_detect"))
    chain = next(c for c in chains(graph) if len(c.nodes) == 7)
    tiled = tiled_graph(graph, chain, 3, "stripes")
    options = MemoryOptions(io="external")
    problem = memory_problem(tiled, options)
    before = _pinned_problem(tiled, monkeypatch)
    assert sum(b.alias_of is not None for b in problem.buffers) < sum(b.alias_of is not None for b in before.buffers)
    x = np.random.default_rng(9).integers(-128, 128, graph.tensors[graph.inputs[0]].shape).astype(np.int8)
    got = Session(tiled, "wic", options, canary=True).prepare().run({graph.inputs[0]: x})
    want = Session(graph, "wic", options).prepare().run({graph.inputs[0]: x})
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_an_int8_stage_placed_by_eject_sits_below_the_greedy_plans_and_runs_bit_for_bit(monkeypatch):
    """The repair tile_auto places its best candidates with: lower than every greedy order on
    person_detect's 8-node head in 3-row stripes, accepted by the checker, never below LOAD,
    and the run inside it equals the untiled run bit for bit with the canary on."""
    graph = load_model(model_path("person_detect"))
    chain = next(c for c in chains(graph) if len(c.nodes) == 8)
    tiled = tiled_graph(graph, chain, 3, "stripes")
    problem = memory_problem(tiled, ACTIVATIONS)
    repaired = planner.plan(problem, "eject", time_limit=30.0)
    assert planner.check_plan(problem, repaired).ok
    greedy = min(planner.plan(problem, s).arena_bytes for s in SEARCH_STRATEGIES)
    assert load(problem) <= repaired.arena_bytes < greedy
    x = np.random.default_rng(11).integers(-128, 128, graph.tensors[graph.inputs[0]].shape).astype(np.int8)
    got = Session(tiled, repaired, ACTIVATIONS, canary=True, problem=problem).prepare().run({graph.inputs[0]: x})
    want = Session(graph, "wic", ACTIVATIONS).prepare().run({graph.inputs[0]: x})
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_tile_auto_repairs_its_best_candidates_below_the_greedy_plans_on_person_detect():
    """The greedy orders place person_detect's fine stripes above their LOAD; the arena tile_auto
    reports for its choice (repaired by eject within its time) is never above theirs nor below LOAD."""
    graph = load_model(model_path("person_detect"))
    tiling = tile_auto(graph, ACTIVATIONS, slack=0.0)
    assert tiling.chosen is not None, tiling.note
    problem = memory_problem(tiling.graph, ACTIVATIONS)
    greedy = min(planner.plan(problem, s).arena_bytes for s in SEARCH_STRATEGIES)
    assert load(problem) < greedy < tiling.arena_bytes_untiled
    assert load(problem) <= (tiling.chosen.arena_bytes or 0) <= greedy
