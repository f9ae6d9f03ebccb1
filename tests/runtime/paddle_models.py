"""Small ONNX models whose inputs are declared the way Paddle (and other exporters) declare them:
-1 for an unknown size, '?' reused as the name of several axes of different sizes, 0 for an
unknown size, and unnamed dims. Shared by the runtime, CLI and REST tests of whole input shapes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def detector() -> onnx.ModelProto:
    """x [-1, 3, '?', '?'] and bias [0, 2, '' (an empty dim_param), 1] ->
    Conv 3x3 -> Relu -> MaxPool 2x2 -> Conv 1x1 -> Sigmoid -> + bias -> y [-1, 2, '?', '?']."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sigmoid"),
        helper.make_node("Add", ["s2", "bias"], ["y"], name="add_bias"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
    bias = helper.make_tensor_value_info("bias", TensorProto.FLOAT, [0, 2, None, 1])
    bias.type.tensor_type.shape.dim[2].dim_param = ""  # present but empty: unnamed
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 2, "?", "?"])
    graph = helper.make_graph(nodes, "paddle_detector", [x, bias], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def classifier() -> onnx.ModelProto:
    """x [-1, 8] (Paddle's unknown batch) and extra [N, 4] (a named dim) -> MatMul -> Relu -> MatMul,
    + extra -> y [-1, 4]: one input bound by a whole shape, the other by --dims."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["z"], name="fc2"),
        helper.make_node("Add", ["z", "extra"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 8])
    extra = helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4])
    graph = helper.make_graph(nodes, "paddle_classifier", [x, extra], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def trainable() -> onnx.ModelProto:
    """x [-1, 8] -> MatMul -> Relu -> MatMul -> y [-1, 4]: a model to plan a training step of."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4])
    graph = helper.make_graph(nodes, "paddle_mlp", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def save(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    return path
