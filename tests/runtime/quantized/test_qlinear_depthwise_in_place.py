"""A depthwise QLinearConv writes its output over its dying input, as a float depthwise Conv does:
the expanded map and its depthwise output are never both held. Outputs are bit-identical to the
same model planned without in-place aliases (the canary on), and within one step of onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels.quantized import qlinear_routes as routes
from runtime.session import Session
from tests.runtime.quantized.test_qlinear_ops import assert_within_one_step

pytestmark = pytest.mark.skipif(not routes.ON, reason="compiled loops off: QLinearConv takes its numpy route")


def _model(strides: int, batch: int):
    rng = np.random.default_rng(strides + batch)

    def init(name, value):
        return numpy_helper.from_array(np.asarray(value), name=name)

    inits = [init("x_s", np.float32(0.05)), init("x_z", np.int8(-3)), init("a_s", np.float32(0.08)),
             init("a_z", np.int8(5)), init("b_s", np.float32(0.06)), init("b_z", np.int8(-7)),
             init("w1", rng.integers(-127, 128, (24, 8, 1, 1)).astype(np.int8)),
             init("w1_s", np.full(24, 0.01, np.float32)), init("w1_z", np.zeros(24, np.int8)),
             init("w2", rng.integers(-127, 128, (24, 1, 3, 3)).astype(np.int8)),
             init("w2_s", rng.uniform(0.005, 0.02, 24).astype(np.float32)), init("w2_z", np.zeros(24, np.int8)),
             init("b2", rng.integers(-400, 400, 24).astype(np.int32)), init("c_s", np.float32(0.1)),
             init("c_z", np.int8(2)), init("w3", rng.integers(-127, 128, (8, 24, 1, 1)).astype(np.int8)),
             init("w3_s", np.full(8, 0.004, np.float32)), init("w3_z", np.zeros(8, np.int8))]  # fmt: skip
    nodes = [
        helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w1", "w1_s", "w1_z", "a_s", "a_z"], ["a"]),
        helper.make_node("QLinearConv", ["a", "a_s", "a_z", "w2", "w2_s", "w2_z", "b_s", "b_z", "b2"], ["b"],
                         group=24, pads=[1, 1, 1, 1], strides=[strides, strides]),
        helper.make_node("QLinearConv", ["b", "b_s", "b_z", "w3", "w3_s", "w3_z", "c_s", "c_z"], ["c"]),
    ]  # fmt: skip
    side = 14 // strides
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.INT8, [batch, 8, 14, 14])],
        [helper.make_tensor_value_info("c", TensorProto.INT8, [batch, 8, side, side])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model, rng.integers(-128, 128, (batch, 8, 14, 14)).astype(np.int8)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("strides", [1, 2])
def test_depthwise_qlinearconv_runs_over_its_input_bit_identical(strides, batch):
    model, x = _model(strides, batch)
    graph = runtime.load_model(model)
    options = runtime.MemoryOptions(io="external")
    problem = runtime.memory_problem(graph, options)
    over = {b.id: b.alias_of for b in problem.buffers if b.alias_of is not None}
    assert over.get("b") == "a", over  # the depthwise output planned over the expanded map
    apart = runtime.MemoryOptions(io="external", inplace=False)
    assert runtime.memory_problem(graph, apart).buffers != problem.buffers
    got = Session(graph, "greedy_by_size", options, canary=True).run({"x": x})["c"]
    want = Session(graph, "greedy_by_size", apart, canary=True).run({"x": x})["c"]
    np.testing.assert_array_equal(got, want)
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(model.SerializeToString(), session_options, providers=["CPUExecutionProvider"])
    # three requantized convs in a row: a share of elements one step off, as in the other chained tests
    assert_within_one_step(oracle.run(None, {"x": x})[0], np.asarray(got), "depthwise over its input", max_share=0.08)
