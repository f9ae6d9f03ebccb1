"""Stages that are small DAGs, and the ops that keep rows where they are: LRN, Concat of
channels, a channel shuffle's Reshape and Transpose. Each region function's bands against
onnxruntime's whole map; a stage with branches joined by a Concat (a fire module, an inception
block, a dense block's concatenation) tiled and run with the canary on against onnxruntime; the
tiled problem's LOAD against the untiled problem's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import planner
from planner.bounds import load
from runtime import MemoryOptions, Session, load_model, memory_problem
from runtime.tiling import METHODS, chains, region_of, tiled_graph
from runtime.tiling.regions import AXIS
from tests.runtime.kernels.harness import close
from tests.runtime.quantized.calibrated import calibrated

EXTERNAL = MemoryOptions(io="external", workspace=False)
RNG = np.random.default_rng(7)


def _model(nodes: list, weights: dict[str, np.ndarray], shape: tuple[int, ...]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )  # fmt: skip
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _conv(name: str, x: str, cin: int, cout: int, k: int, stride: int = 1) -> tuple[list, dict[str, np.ndarray]]:
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32) * 0.1
    pad = k // 2
    conv = helper.make_node(
        "Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2
    )
    relu = helper.make_node("Relu", [f"{name}_c"], [name])
    return [conv, relu], {f"{name}_w": w, f"{name}_b": b}


@pytest.mark.parametrize(
    ("nodes", "shape"),
    [
        ([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.01, beta=0.75, bias=2.0)], (1, 6, 9, 5)),
        ([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], (1, 3, 7, 4)),
        ([helper.make_node("Concat", ["x", "x"], ["y"], axis=-1)], (1, 3, 7, 4)),
        ([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3, 4])], (1, 2, 3, 7, 4)),
    ],
    ids=["LRN", "Concat-channels", "Concat-width", "Transpose-groups"],
)
def test_a_band_of_rows_computed_alone_equals_those_rows_of_the_whole_map(nodes, shape):
    """The op on the input rows its region function names gives the output rows asked for."""
    x = RNG.standard_normal(shape).astype(np.float32)
    whole = _onnxruntime(_model(nodes, {}, shape), x)
    node = load_model(_model(nodes, {}, shape)).nodes[0]
    fn = region_of(node)
    assert fn is not None
    axis = len(shape) - 2
    out_axis = axis  # none of these moves the rows' axis
    attrs = {**node.attributes, AXIS: axis}
    for rows in (1, 2, 3):
        for y0 in range(0, shape[axis], rows):
            y1 = min(y0 + rows, shape[axis])
            found = fn(attrs, shape, whole.shape, y0, y1)
            assert found is not None and not found.overrides
            band = np.take(x, range(found.a, found.b), axis=axis)
            got = _onnxruntime(_model(nodes, {}, band.shape), np.ascontiguousarray(band))
            close([got], [np.take(whole, range(y0, y1), axis=out_axis)], what=f"{node.op_type} rows {y0}:{y1}")


def test_ops_that_would_cut_across_rows_are_refused():
    """A Concat along the rows and a Reshape that merges the rows' axis end the chain before them."""
    conv, weights = _conv("c", "x", 3, 3, 3)
    for last, extra in [
        (helper.make_node("Concat", ["c", "c"], ["y"], axis=2), {}),
        (helper.make_node("Concat", ["c", "c"], ["y"], axis=-2), {}),
        (helper.make_node("Reshape", ["c", "s"], ["y"]), {"s": np.array([1, 3, 64, 1], np.int64)}),
    ]:
        graph = load_model(_model([*conv, last], {**weights, **extra}, (1, 3, 8, 8)))
        assert chains(graph), last.op_type
        assert all(len(c.nodes) < len(graph.nodes) for c in chains(graph)), last.op_type


def _dag_model(size: int = 32) -> onnx.ModelProto:
    """conv stride 2 -> LRN -> fire module (1x1 squeeze, 1x1 and 3x3 expands, Concat) -> channel
    shuffle (Reshape 5-D, Transpose, Reshape) -> inception-like block (3x3 conv and 3x3 max pool
    of one map, Concat with its input) -> conv stride 2 -> global pool."""
    nodes, weights = [], {}

    def add(built: tuple[list, dict[str, np.ndarray]]) -> None:
        nodes.extend(built[0])
        weights.update(built[1])

    add(_conv("c1", "x", 3, 16, 3, 2))
    nodes.append(helper.make_node("LRN", ["c1"], ["n1"], size=5, alpha=1e-3, beta=0.75, bias=1.0))
    add(_conv("sq", "n1", 16, 4, 1))
    add(_conv("e1", "sq", 4, 8, 1))
    add(_conv("e3", "sq", 4, 8, 3))
    nodes.append(helper.make_node("Concat", ["e1", "e3"], ["fire"], axis=1))
    h = size // 2
    weights["s5"] = np.array([1, 2, 8, h, h], np.int64)
    weights["s4"] = np.array([1, 16, h, h], np.int64)
    nodes.append(helper.make_node("Reshape", ["fire", "s5"], ["g5"]))
    nodes.append(helper.make_node("Transpose", ["g5"], ["t5"], perm=[0, 2, 1, 3, 4]))
    nodes.append(helper.make_node("Reshape", ["t5", "s4"], ["shuf"]))
    add(_conv("b3", "shuf", 16, 8, 3))
    nodes.append(helper.make_node("MaxPool", ["shuf"], ["bp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["b3", "bp", "shuf"], ["block"], axis=1))
    add(_conv("c2", "block", 40, 8, 3, 2))
    nodes.append(helper.make_node("GlobalAveragePool", ["c2"], ["y"]))
    return _model(nodes, weights, (1, 3, size, size))


@pytest.fixture(scope="module")
def dag() -> onnx.ModelProto:
    return _dag_model()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def test_chains_run_through_branches_joined_by_a_concat_and_a_channel_shuffle(dag):
    graph = load_model(dag)
    longest = chains(graph)[-1]
    names = [n.op_type for n in longest.nodes]
    assert {"LRN", "Concat", "Reshape", "Transpose", "MaxPool"} <= set(names)
    assert graph.tensors[longest.output].shape[1:] == (8, 8, 8)  # the last conv's map: all but the pool
    assert dict(longest.axes)["g5"] == 3  # the rows sit on axis 3 of the 5-D shuffle


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("rows", [1, 3])
def test_a_dag_stage_runs_to_onnxruntimes_outputs_and_its_load_falls(dag, image, method, rows):
    graph = load_model(dag)
    chain = chains(graph)[-1]
    tiled = tiled_graph(graph, chain, rows, method)
    problem = memory_problem(tiled, EXTERNAL)
    plan = planner.plan(problem, "greedy_by_size")
    assert planner.check_plan(problem, plan).ok
    if method == "stripes":  # rolling buffers; patches of 3 of this small map's 8 rows recompute most of it
        assert load(problem) < load(memory_problem(graph, EXTERNAL))
    got = Session(tiled, plan, EXTERNAL, canary=True, problem=problem).prepare().run({"x": image})
    close([next(iter(got.values()))], [_onnxruntime(dag, image)], what=f"{method} {rows}")


@pytest.mark.parametrize("rows", [2, 4])
def test_no_band_of_stripes_computes_more_rows_than_a_band_of_input_gives(dag, rows):
    """A map of height H advances about rows * H / H_in rows per band of `rows` input rows: the
    rows a deep map still lacks when the input is all read are drained a band at a time, not
    all in the last band (this DAG's last map lags its input by its windows' reach)."""
    graph = load_model(dag)
    chain = chains(graph)[-1]
    tiled = tiled_graph(graph, chain, rows, "stripes")
    source = chain.height(graph, chain.source)
    for node in chain.nodes:
        out = node.outputs[0]
        height = chain.height(graph, out)
        made = [t for n in tiled.nodes if n.name.startswith(f"{node.name}@") for t in n.outputs]
        most = max(tiled.tensors[t].shape[chain.axis(out)] for t in made)
        assert most <= -(-rows * height // source) + 1, (node.name, most)
        assert sum(tiled.tensors[t].shape[chain.axis(out)] for t in made) == height  # stripes repeat nothing


def test_auto_tiles_through_the_branches_when_that_lowers_the_arena(dag, image):
    """tile_auto takes a stage that joins branches (its Concat inside), placed smaller than untiled."""
    from runtime.tiling import tile_auto

    graph = load_model(dag)
    tiling = tile_auto(graph, EXTERNAL, time_limit=20.0)
    assert tiling.chosen is not None, tiling.note
    assert "Concat" in {n.op_type for n in tiling.chosen.chain.nodes}
    untiled = planner.plan(memory_problem(graph, EXTERNAL), "greedy_by_size").arena_bytes
    problem = memory_problem(tiling.graph, EXTERNAL)
    plan = planner.plan(problem, "greedy_by_size")
    assert planner.check_plan(problem, plan).ok and plan.arena_bytes < untiled
    got = Session(tiling.graph, plan, EXTERNAL, canary=True, problem=problem).prepare().run({"x": image})
    close([next(iter(got.values()))], [_onnxruntime(dag, image)], what="auto")


def test_a_quantized_fire_module_tiled_equals_its_untiled_run_bit_for_bit(tmp_path):
    """A fire module quantized by onnxruntime's own tool (QDQ, int8): its Concat becomes QLinearConcat,
    and bands of it give the very integers of the whole maps."""
    pytest.importorskip("onnxruntime.quantization")
    nodes, weights = [], {}
    for built in (_conv("c1", "x", 3, 8, 3, 2), _conv("sq", "c1", 8, 4, 1), _conv("e1", "sq", 4, 8, 1)):
        nodes += built[0]
        weights |= built[1]
    built = _conv("e3", "sq", 4, 8, 3)
    nodes += [*built[0], helper.make_node("Concat", ["e1", "e3"], ["fire"], axis=1)]
    weights |= built[1]
    built = _conv("c2", "fire", 16, 8, 3, 2)
    nodes += [*built[0], helper.make_node("GlobalAveragePool", ["c2"], ["y"])]
    weights |= built[1]
    shape = (1, 3, 24, 24)
    float_path, path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    onnx.save(_model(nodes, weights, shape), float_path)
    images = [np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i in range(3)]

    calibrated(float_path, path, [{"x": image} for image in images[:2]], per_channel=False)
    graph = load_model(path)
    chain = chains(graph)[-1]
    assert "QLinearConcat" in {n.op_type for n in chain.nodes}
    want = Session(graph, "greedy_by_size", EXTERNAL).prepare().run({"x": images[2]})
    for method in METHODS:
        tiled = tiled_graph(graph, chain, 2, method)
        got = Session(tiled, "greedy_by_size", EXTERNAL, canary=True).prepare().run({"x": images[2]})
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=method)
