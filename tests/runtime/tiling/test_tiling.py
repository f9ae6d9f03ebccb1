"""Tiled stages: region maths against onnx.reference, tiled runs against onnxruntime with the
canary on, the search's promises (never larger, says why when untiled), and a wrong tile plan caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import planner
from runtime import CanaryError, MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import METHODS, chains, region_of, tile_auto, tiled_graph
from runtime.tiling.macs import graph_macs
from runtime.tiling.search import SEARCH_STRATEGIES, arena_of
from runtime.training.models import mobilenet_v2_like
from tests.runtime.kernels.harness import run_ort

EXTERNAL = MemoryOptions(io="external")


@pytest.fixture(scope="module")
def mobilenet() -> onnx.ModelProto:
    return mobilenet_v2_like(size=48, width=0.35, classes=10)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((1, 3, 48, 48)).astype(np.float32)


@pytest.mark.parametrize(
    ("attrs", "size"),
    [
        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}, 9),
        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, 11),
        ({"kernel_shape": [5, 3], "pads": [2, 1, 1, 1], "strides": [2, 1], "dilations": [1, 1]}, 12),
        ({"kernel_shape": [3, 3], "pads": [0, 0, 0, 0], "dilations": [2, 2]}, 10),
        ({"kernel_shape": [4, 4], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, 9),
        ({"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"}, 7),
    ],
)
@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool"])
def test_a_band_computed_from_its_region_equals_those_rows_of_the_whole_map(attrs, size, op):
    """onnxruntime computes the whole map, then each band alone from the rows the region function
    names (between the zero columns it asks for) under its pads: equal rows, for every band of every height. (onnx.reference's pooling
    reads asymmetric pads in another order than the spec's, so it is not the oracle here.)"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, size, size)).astype(np.float32)
    attrs = dict(attrs)
    if op == "AveragePool":
        attrs.pop("dilations", None)
    inputs = ["x", "w"] if op == "Conv" else ["x"]
    w = rng.standard_normal((3, 2, *attrs["kernel_shape"])).astype(np.float32)

    def evaluate(node_attrs: dict, data: np.ndarray) -> np.ndarray:
        node = helper.make_node(op, inputs, ["y"], **node_attrs)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w")] if op == "Conv" else [],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return run_ort(model, {"x": data})[0]

    whole = evaluate(attrs, x)
    fn = region_of(helper.make_node(op, inputs, ["y"]))
    assert fn is not None
    height = whole.shape[2]
    for rows in (1, 2, 3):
        for y0 in range(0, height, rows):
            y1 = min(y0 + rows, height)
            region = fn(attrs, x.shape, whole.shape, y0, y1)
            assert region is not None
            data = np.pad(x[:, :, region.a : region.b], [(0, 0), (0, 0), (0, 0), region.columns])
            band = evaluate({**attrs, **region.overrides}, data)
            np.testing.assert_allclose(band, whole[:, :, y0:y1], rtol=1e-5, atol=1e-5, err_msg=f"{op} rows {y0}:{y1}")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cut", [0.25, 0.5, 1.0])
@pytest.mark.parametrize("rows", [1, 3])
def test_a_tiled_model_runs_to_onnxruntimes_outputs_with_the_canary_on(mobilenet, image, method, cut, rows):
    graph = load_model(mobilenet)
    heads = chains(graph)
    chain = heads[max(0, int(len(heads) * cut) - 1)]
    rows = min(rows, graph.tensors[chain.output].shape[2])
    tiled = tiled_graph(graph, chain, rows, method)
    assert len(tiled.nodes) > len(graph.nodes)
    session = Session(tiled, "greedy_by_size", EXTERNAL, canary=True).prepare()
    got = session.run({"x": image})
    (want,) = run_ort(mobilenet, {"x": image})
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-4, atol=1e-5)


def test_stripes_repeat_no_multiply_accumulate_and_patches_repeat_their_halos(mobilenet):
    graph = load_model(mobilenet)
    chain = chains(graph)[len(chains(graph)) // 2]
    total = graph_macs(graph)
    assert graph_macs(tiled_graph(graph, chain, 2, "stripes")) == total
    assert graph_macs(tiled_graph(graph, chain, 1, "patches")) > total


def test_auto_lowers_the_arena_of_a_net_whose_first_maps_are_its_largest(image):
    model = mobilenet_v2_like(size=96, width=0.5, classes=10)
    graph = load_model(model)
    tiling = tile_auto(graph, EXTERNAL)
    untiled = planner.plan(memory_problem(graph, EXTERNAL), "greedy_by_size").arena_bytes
    assert tiling.arena_bytes_untiled == untiled
    assert tiling.chosen is not None, tiling.note
    field = tiling.to_json()
    assert field is not None and set(field) == {"stages", "extra_macs", "arena_bytes_untiled", "curve"}
    (stage,) = field["stages"]
    assert stage["method"] in METHODS and stage["tiles"] > 1 and stage["nodes"]
    assert 0 <= field["extra_macs"] <= 0.2
    arena = planner.plan(memory_problem(tiling.graph, EXTERNAL), "greedy_by_size").arena_bytes
    assert arena < untiled / 2
    assert {"extra_macs": 0.0, "arena_bytes": untiled} in field["curve"]
    assert all(set(p) == {"extra_macs", "arena_bytes"} for p in field["curve"])
    x = np.random.default_rng(0).standard_normal((1, 3, 96, 96)).astype(np.float32)
    got = Session(tiling.graph, "greedy_by_size", EXTERNAL).prepare().run({"x": x})
    np.testing.assert_allclose(next(iter(got.values())), run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_model_with_nothing_tileable_stays_untiled_and_says_so():
    from runtime.training.models import mlp

    graph = load_model(mlp())
    tiling = tile_auto(graph, EXTERNAL)
    assert tiling.chosen is None and tiling.graph is graph and tiling.to_json() is None
    assert "nothing tileable" in tiling.note


def test_auto_never_returns_a_larger_arena_than_untiled():
    """A net whose maps grow after a tiny head: every tiling costs bytes, so none is taken."""
    model = mobilenet_v2_like(size=16, width=0.35, classes=10)
    graph = load_model(model)
    tiling = tile_auto(graph, EXTERNAL, overhead=0.0)
    untiled = planner.plan(memory_problem(graph, EXTERNAL), "greedy_by_size").arena_bytes
    arena = planner.plan(memory_problem(tiling.graph, EXTERNAL), "greedy_by_size").arena_bytes
    assert arena <= untiled
    assert all(p["extra_macs"] >= 0 for p in tiling.curve)
    if tiling.chosen is None:
        assert "untiled" in tiling.note


def test_the_canary_catches_a_tile_plan_that_puts_a_band_over_rows_a_later_band_still_reads(mobilenet, image):
    graph = load_model(mobilenet)
    chain = chains(graph)[len(chains(graph)) // 2]
    tiled = tiled_graph(graph, chain, 2, "stripes")
    problem = memory_problem(tiled, EXTERNAL)
    plan = planner.plan(problem, "greedy_by_size")
    # The tile alive longest: rows an earlier band made that later bands still read.
    tiles = [b for b in problem.buffers if "@" in b.id and "placed" not in b.id and b.alias_of is None]
    kept = max(tiles, key=lambda b: (b.last - b.first, b.id))
    assert kept.last - kept.first > 2
    writer = next(
        b for b in problem.buffers
        if kept.first < b.first < kept.last and b.kind == "activation" and b.alias_of is None and b.size > 0
    )  # fmt: skip
    offsets = dict(plan.offsets)
    offsets[writer.id] = dataclasses.replace(offsets[writer.id], offset=offsets[kept.id].offset)
    wrong = dataclasses.replace(plan, offsets=offsets)
    session = Session(tiled, wrong, EXTERNAL, canary=True, check=False, problem=problem).prepare()
    with pytest.raises(CanaryError) as caught:
        session.run({"x": image})
    assert kept.id in str(caught.value) and "@" in caught.value.node


def _placed(graph, chain, rows: int, method: str) -> int:
    return arena_of(memory_problem(tiled_graph(graph, chain, rows, method), EXTERNAL), SEARCH_STRATEGIES)


def test_slack_trades_a_few_percent_of_arena_for_fewer_bands():
    """With no slack the choice is the smallest arena of the head's band heights, placed here one
    by one; with slack it is never more bands, and its arena stays within the slack of that one."""
    from runtime.tiling.search import candidate_rows

    graph = load_model(mobilenet_v2_like(size=96, width=0.5, classes=10))
    tight = tile_auto(graph, EXTERNAL, slack=0.0)
    loose = tile_auto(graph, EXTERNAL, slack=0.5)
    assert tight.chosen is not None and loose.chosen is not None, (tight.note, loose.note)
    chain, method = tight.chosen.chain, tight.chosen.method
    arenas = [_placed(graph, chain, rows, method) for rows in candidate_rows(graph, chain, method)]
    assert tight.chosen.arena_bytes == _placed(graph, chain, tight.chosen.rows, method) == min(arenas)
    assert loose.chosen.tiles <= tight.chosen.tiles
    assert (loose.chosen.arena_bytes or 0) <= 1.5 * (tight.chosen.arena_bytes or 0)
    assert loose.chosen.arena_bytes == _placed(graph, loose.chosen.chain, loose.chosen.rows, loose.chosen.method)
