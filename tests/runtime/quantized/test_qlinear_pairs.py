"""QLinearAdd and QLinearMul by the table of every pair of input values (the constants hook makes it
for outputs of `PAIRS_FROM` elements or more): through a Session, bit-identical to the compiled
arithmetic it tabulates (a one-shot call, which prepares no table) and within one step of onnxruntime,
with either input stretched over the rows; and QLinearConcat's tables, made once the same way."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from runtime.kernels.quantized import qlinear_ops
from runtime.kernels.quantized.jit_qlinear import PAIRS
from tests.runtime.quantized.test_qlinear_ops import ONNX_TYPES, assert_within_one_step, run_both

ort = pytest.importorskip("onnxruntime")
MS = "com.microsoft"


def _model(op, dtype, a_shape, b_shape, params):
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, params, strict=True) if n not in "ab"]
    # a second op reading the first's output twice: a table of its own, over a full row and itself
    node = helper.make_node(op, names, ["y"], domain=MS)
    after = helper.make_node("QLinearMul" if op == "QLinearAdd" else "QLinearAdd", ["y", "y_s", "y_z", "y", "y_s",
                             "y_z", "y_s", "y_z"], ["z"], domain=MS)  # fmt: skip
    elem = ONNX_TYPES[np.dtype(dtype)]
    out_shape = list(np.broadcast_shapes(a_shape, b_shape))
    graph = helper.make_graph(
        [node, after], "pairs",
        [helper.make_tensor_value_info("a", elem, list(a_shape)), helper.make_tensor_value_info("b", elem, list(b_shape))],
        [helper.make_tensor_value_info("y", elem, out_shape), helper.make_tensor_value_info("z", elem, out_shape)],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


@pytest.mark.skipif(PAIRS is None, reason="compiled loops off: no table of pairs")
@pytest.mark.parametrize("op, dtype, a_shape, b_shape", [
    ("QLinearAdd", np.int8, (1, 4, 128, 128), (1, 4, 128, 128)),
    ("QLinearMul", np.uint8, (1, 4, 128, 128), (1, 4, 1, 1)),
    ("QLinearAdd", np.uint8, (1, 4, 1, 128), (1, 4, 128, 128)),
])  # fmt: skip
def test_pairs_table_is_the_compiled_arithmetic(tmp_path, op, dtype, a_shape, b_shape):
    import runtime
    from runtime.session import Session

    rng = np.random.default_rng(len(a_shape) + len(op))
    info = np.iinfo(dtype)
    a, b = (rng.integers(info.min, info.max + 1, shape).astype(dtype) for shape in (a_shape, b_shape))
    zero = 128 if dtype == np.uint8 else 0
    scale_y = np.float32(0.07 if op == "QLinearAdd" else 0.3)
    params = [a, np.float32(0.05), np.array(zero + 2, dtype), b, np.float32(0.04), np.array(zero - 3, dtype),
              scale_y, np.array(zero + 1, dtype)]  # fmt: skip
    path = tmp_path / "pairs.onnx"
    path.write_bytes(_model(op, dtype, a_shape, b_shape, params).SerializeToString())
    graph = runtime.load_model(path)
    session = Session(graph)
    got = session.run({"a": a, "b": b})
    assert session.constant_bytes >= 2 * 256 * 256  # both nodes' tables of pairs, prepared once
    assert np.prod(np.broadcast_shapes(a_shape, b_shape)) >= qlinear_ops.PAIRS_FROM
    expected, arithmetic = run_both(op, params, domain=MS, constants=(1, 2, 4, 5, 6, 7), out_dtype=dtype)
    np.testing.assert_array_equal(np.asarray(got["y"]), arithmetic)  # the table gives what the arithmetic does
    assert_within_one_step(expected, np.asarray(got["y"]), f"{op} by its table", max_share=0.08)


def test_concat_tables_made_once_are_the_per_call_ones(tmp_path):
    """QLinearConcat through a Session, its inputs' tables into the output's scale made once by its
    constants hook (one input at the output's scale: copied): the same integers as a one-shot call,
    which makes them per call, and within one step of onnxruntime."""
    import runtime
    from runtime.session import Session

    rng = np.random.default_rng(13)
    a, b = rng.integers(0, 256, (1, 3, 4, 5)).astype(np.uint8), rng.integers(0, 256, (1, 2, 4, 5)).astype(np.uint8)
    scales = [np.float32(0.1), np.uint8(128), a, np.float32(0.05), np.uint8(120), b, np.float32(0.1), np.uint8(128)]
    names = ["y_s", "y_z", "a", "a_s", "a_z", "b", "b_s", "b_z"]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, scales, strict=True) if n not in "ab"]
    node = helper.make_node("QLinearConcat", names, ["y"], domain=MS, axis=1)
    elem = ONNX_TYPES[np.dtype(np.uint8)]
    graph = helper.make_graph([node], "concat", [helper.make_tensor_value_info("a", elem, [1, 3, 4, 5]),
                              helper.make_tensor_value_info("b", elem, [1, 2, 4, 5])],
                              [helper.make_tensor_value_info("y", elem, [1, 5, 4, 5])], inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    path = tmp_path / "concat.onnx"
    path.write_bytes(model.SerializeToString())
    session = Session(runtime.load_model(path))
    got = np.asarray(session.run({"a": a, "b": b})["y"])
    assert session.constant_bytes >= 2 * 256  # the two tables, prepared once
    expected, per_call = run_both("QLinearConcat", scales, {"axis": 1}, domain=MS, out_dtype=np.uint8,
                                  constants=(0, 1, 3, 4, 6, 7))  # fmt: skip
    np.testing.assert_array_equal(got, per_call)
    assert_within_one_step(expected, got, "QLinearConcat by its prepared tables", max_share=0.1)
