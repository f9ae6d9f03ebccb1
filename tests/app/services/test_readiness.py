"""What the model page says a model lacks for training, before anyone clicks, agrees with what
runtime.training does when it builds the step: by op types for open dims, by building otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from app.services.readiness import training
from runtime import ModelError
from runtime.training import build_training_step


def _classifier(tmp_path, weights_made_by_constant_of_shape: bool):
    """x[N, 4] -> MatMul W[4, 3] -> y, W an initializer or made by ConstantOfShape."""
    if weights_made_by_constant_of_shape:
        shape = numpy_helper.from_array(np.array([4, 3], np.int64), "w_shape")
        value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])
        nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["W"], value=value)]
        inits = [shape]
    else:
        nodes, inits = [], [numpy_helper.from_array(np.full((4, 3), 0.1, np.float32), "W")]
    nodes.append(helper.make_node("MatMul", ["x", "W"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
    )
    path = tmp_path / f"classifier_{int(weights_made_by_constant_of_shape)}.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


@pytest.mark.parametrize("made", [False, True], ids=["initializer", "constant-of-shape"])
def test_open_dims_judged_by_op_types_agree_with_building_the_step(tmp_path, made):
    path = _classifier(tmp_path, made)
    ops = [{"op_type": "MatMul", "count": 1}] + ([{"op_type": "ConstantOfShape", "count": 1}] if made else [])
    summary = {"symbolic_dims": ["N"], "ops": ops, "parameters": 0 if made else 1}
    said = training(path, summary, path.stat().st_size)
    assert said["how"] == "op types"
    build_training_step(str(path), dims={"N": 2})  # the oracle: runtime.training builds it
    assert said["ready"] is True and said["lacks"] == []


def test_a_model_without_weights_is_said_to_lack_them(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "no_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    path = tmp_path / "relu.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    summary = {"symbolic_dims": ["N"], "ops": [{"op_type": "Relu", "count": 1}], "parameters": 0}
    said = training(path, summary, path.stat().st_size)
    assert said["ready"] is False and "no trainable weights" in said["lacks"][0]
    with pytest.raises(ModelError):
        build_training_step(str(path), dims={"N": 2})
