"""A Conv over a map with a zero dim (a malformed or degenerate model's) runs through a Session and
writes its empty output, as onnx.reference does, instead of failing in a route cutting bands or
columns of nothing."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import runtime


@pytest.mark.parametrize("workspace", [True, False])
@pytest.mark.parametrize("shape", [(1, 3, 8, 0), (1, 3, 0, 8)])
def test_conv_over_an_empty_map_writes_an_empty_output(shape, workspace):
    w = np.ones((4, 3, 3, 3), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(
        [node, relu],
        "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, *shape[2:]))],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.zeros(shape, np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    session = runtime.Session(runtime.load_model(model), "greedy_by_size", runtime.MemoryOptions(workspace=workspace))
    got = session.run({"x": x})["y"]
    assert got.shape == want.shape == (1, 4, *shape[2:])
