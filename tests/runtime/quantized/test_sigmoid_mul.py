"""SiLU in a quantized model (QLinearSigmoid, then QLinearMul of its input by it) joined at load into
one QLinearSigmoidMul table: the same integers as the two kernels run one after the other, within
one step of onnxruntime, and planned over its input, so the input and its sigmoid are never both held."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import runtime
from runtime.kernels import TensorMeta, call, get_kernel
from runtime.session import Session
from tests.runtime.quantized.test_qlinear_ops import assert_within_one_step

MS = "com.microsoft"


def _silu_model(dtype, mul_order: str):
    zero = {np.int8: 3, np.uint8: 131}[dtype]
    elem = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}[dtype]
    inits = [numpy_helper.from_array(np.asarray(v, dtype=t), name=n) for n, v, t in [
        ("x_s", 0.04, np.float32), ("x_z", zero, dtype), ("s_s", 1 / 256, np.float32), ("s_z", zero - 128, dtype),
        ("y_s", 0.03, np.float32), ("y_z", zero + 2, dtype), ("k_s", 0.05, np.float32), ("k_z", zero, dtype),
    ]]  # fmt: skip
    x_side, s_side = ["a", "x_s", "x_z"], ["s", "s_s", "s_z"]
    first, second = (x_side, s_side) if mul_order == "x*s" else (s_side, x_side)
    nodes = [
        # the SiLU's input made inside the graph, so that it dies at the Mul as in a network
        helper.make_node("QLinearAdd", ["x", "x_s", "x_z", "x", "x_s", "x_z", "x_s", "x_z"], ["a"], domain=MS),
        helper.make_node("QLinearSigmoid", ["a", "x_s", "x_z", "s_s", "s_z"], ["s"], domain=MS),
        helper.make_node("QLinearMul", [*first, *second, "y_s", "y_z"], ["y"], domain=MS),
        helper.make_node("QLinearAdd", ["y", "y_s", "y_z", "y", "y_s", "y_z", "k_s", "k_z"], ["k"], domain=MS),
    ]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", elem, [1, 16, 12, 12])],
                              [helper.make_tensor_value_info("k", elem, [1, 16, 12, 12])], inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("mul_order", ["x*s", "s*x"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_silu_is_one_table_with_the_pairs_integers(dtype, mul_order):
    model = _silu_model(dtype, mul_order)
    graph = runtime.load_model(model)
    ops = [n.op_type for n in graph.nodes]
    assert "QLinearSigmoidMul" in ops and "QLinearSigmoid" not in ops and "QLinearMul" not in ops
    options = runtime.MemoryOptions(io="external")
    over = {b.id: b.alias_of for b in runtime.memory_problem(graph, options).buffers if b.alias_of}
    assert over.get("y") == "a", over  # the table writes over its dying input
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max + 1, (1, 16, 12, 12)).astype(dtype)
    got = Session(graph, "greedy_by_size", options, canary=True).run({"x": x})["k"]
    # The pair as written, node by node through its own kernels: the oracle for the joined table.
    values = {"x": x, **{i.name: numpy_helper.to_array(i) for i in model.graph.initializer}}
    for node in model.graph.node:
        kernel = get_kernel(node.op_type, node.domain)
        inputs, out = [values[i] for i in node.input], np.empty(x.shape, dtype)
        metas = [TensorMeta(np.shape(v), np.asarray(v).dtype) for v in inputs]
        ws = (
            None
            if kernel.workspace is None
            else np.zeros(kernel.workspace(metas, [TensorMeta(out.shape, dtype)]), np.uint8)
        )
        call(kernel, inputs, [out], ws, {}, 1)
        values[node.output[0]] = out
    np.testing.assert_array_equal(got, values["k"])
    options_ort = ort.SessionOptions()
    options_ort.intra_op_num_threads = 1
    oracle = ort.InferenceSession(model.SerializeToString(), options_ort, providers=["CPUExecutionProvider"])
    assert_within_one_step(oracle.run(None, {"x": x})[0], np.asarray(got), "SiLU joined", max_share=0.08)
