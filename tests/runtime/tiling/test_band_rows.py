"""Stripes compute a narrow map of a node with large weights several rows a call
(`runtime.tiling.stage.ROW_PIXELS`, `WEIGHT_BYTES`), a node with small weights a row a call,
and the tiled run still matches onnxruntime with the canary on."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from runtime import MemoryOptions, Session, load_model
from runtime.tiling import chains, tiled_graph
from runtime.tiling.stage import ROW_PIXELS, WEIGHT_BYTES
from tests.runtime.kernels.harness import close

WIDTH = 14


def _model(big: int, small: int):
    """Conv 1x1 from `small` channels to `big` (weights under WEIGHT_BYTES) -> Conv 3x3 (`big`
    channels in and out: weights over) -> Relu, on a WIDTH x WIDTH map."""
    rng = np.random.default_rng(41)
    w1 = (rng.standard_normal((big, small, 1, 1)) / np.sqrt(small)).astype(np.float32)
    w2 = (rng.standard_normal((big, big, 3, 3)) / np.sqrt(9 * big)).astype(np.float32)
    assert w2.nbytes >= WEIGHT_BYTES > w1.nbytes
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bands",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, small, WIDTH, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, big, WIDTH, WIDTH])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_node_with_large_weights_computes_a_narrow_map_several_rows_a_call():
    model = _model(big=96, small=8)
    graph = load_model(model)
    chain = next(c for c in chains(graph) if len(c.nodes) == len(graph.nodes))
    tiled = tiled_graph(graph, chain, 1, "stripes")
    heights = {}
    for node in tiled.nodes:
        if "@" in node.name and node.op_type != "TileRows":
            shape = tiled.tensors[node.outputs[0]].shape
            heights.setdefault(node.name.split("@")[0], []).append(shape[2])
    small, big = (graph.nodes[0].name, graph.nodes[-1].name)
    least = -(-ROW_PIXELS // WIDTH)
    # large weights: `least` rows a call while the input comes in (the stage's last rows drain as they may)
    assert sum(heights[big]) == WIDTH and heights[big][: WIDTH // least - 1] == [least] * (WIDTH // least - 1)
    assert min(heights[small]) == 1, heights[small]  # small weights: as soon as a row is there
    assert len(heights[big]) < len(heights[small])
    x = np.random.default_rng(2).standard_normal((1, 8, WIDTH, WIDTH)).astype(np.float32)
    got = Session(tiled, "greedy_by_size", MemoryOptions(io="external"), canary=True).prepare().run({"x": x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    close([got["y"]], session.run(None, {"x": x}), what="tiled against onnxruntime")
