"""`runtime.oracle.verify` picks its oracle by format: a `.tflite` model is judged by TensorFlow Lite
Micro's interpreter, bit for bit on integer outputs; a quantized ONNX model by onnxruntime, within one
quantization step on 8-bit outputs (TensorFlow Lite's rounding against onnxruntime's)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import Session, load_model
from runtime.oracle import random_inputs, verify
from tests.runtime.tflite.shared import model_path

pytest.importorskip("tflite_micro")


@pytest.mark.parametrize("name", ["hello_world_int8", "person_detect"])
def test_a_tflite_model_is_judged_by_tensorflow_lite_micro_bit_for_bit(name):
    path = model_path(name)
    graph = load_model(path)
    feeds = random_inputs(graph, seed=1)
    (first,) = graph.inputs
    info = np.iinfo(graph.tensors[first].dtype)
    if feeds[first].size >= 1024:  # a quantized input is fed over its whole range
        assert feeds[first].min() < info.min + 16 and feeds[first].max() > info.max - 16
    outputs = Session(graph).run(feeds)
    verdict = verify(path, feeds, outputs)
    assert verdict["oracle"] == "tflite-micro" and verdict["passed"] is True, verdict
    assert "bit-exact" in verdict["check"]
    (row,) = verdict["outputs"]
    off = {row["name"]: outputs[row["name"]].copy()}
    flat = off[row["name"]].reshape(-1)
    flat[0] = flat[0] + 1 if flat[0] < info.max else flat[0] - 1  # one step on one element
    wrong = verify(path, feeds, off)
    (bad,) = wrong["outputs"]
    assert wrong["passed"] is False and bad["mismatched"] == 1 and bad["max_steps"] == 1


def test_a_tflite_model_has_no_onnx_oracle():
    path = model_path("hello_world_int8")
    graph = load_model(path)
    feeds = random_inputs(graph, seed=1)
    verdict = verify(path, feeds, Session(graph).run(feeds), prefer="onnxruntime")
    assert verdict["oracle"] is None and verdict["passed"] is None


def _quantize_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"])],
        "quantize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("q", TensorProto.INT8, [64])],
        [numpy_helper.from_array(np.float32(0.05), "scale"), numpy_helper.from_array(np.int8(3), "zero")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_8_bit_onnx_output_may_differ_by_one_step_and_says_where():
    model = _quantize_model()
    feeds = {"x": np.linspace(-4, 4, 64, dtype=np.float32)}
    from runtime.oracle import oracle_outputs

    _, want, _ = oracle_outputs(model, feeds)
    assert want is not None
    one = want["q"].copy()
    one[5] += 1
    verdict = verify(model, feeds, {"q": one})
    (row,) = verdict["outputs"]
    assert verdict["passed"] is True and row["differing"] == 1 and row["max_steps"] == 1 and row["mismatched"] == 0
    two = want["q"].copy()
    two[5] += 2
    (row,) = verify(model, feeds, {"q": two})["outputs"]
    assert row["close"] is False and row["mismatched"] == 1 and row["max_steps"] == 2
