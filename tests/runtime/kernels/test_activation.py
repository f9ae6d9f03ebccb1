"""Activation fast paths against onnx's reference evaluator: Relu against a row of zeros
(lengths around the row size, in place, NaN and infinities, dtypes without a zero row)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import get_kernel
from runtime.kernels.activation import ZERO_ROW

_ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
               np.int32: TensorProto.INT32}  # fmt: skip


def _reference_relu(x: np.ndarray) -> np.ndarray:
    t = _ONNX_TYPES[x.dtype.type]
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "relu", [helper.make_tensor_value_info("x", t, x.shape)], [helper.make_tensor_value_info("y", t, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("size", [0, 1, 7, ZERO_ROW - 1, ZERO_ROW, ZERO_ROW + 1, 3 * ZERO_ROW + 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_relu_matches_reference_bit_for_bit(size: int, dtype) -> None:
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 10).astype(dtype)
    if size >= 4 and np.issubdtype(dtype, np.floating):
        x[:4] = [np.nan, -np.inf, np.inf, -0.0]
    want = _reference_relu(x)
    out = np.full_like(x, 7)
    get_kernel("Relu").fn(x, out=out)
    np.testing.assert_array_equal(out, want)
    assert out.tobytes() == want.tobytes()  # NaN kept, no negative zero


def test_relu_in_place_and_on_strided_views() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, ZERO_ROW + 11)).astype(np.float32)
    want = _reference_relu(x)
    inplace = x.copy()
    get_kernel("Relu").fn(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, want)
    # A transposed (not C-contiguous) input takes the general path and gives the same result.
    out = np.empty((ZERO_ROW + 11, 3), np.float32)
    get_kernel("Relu").fn(x.T, out=out)
    np.testing.assert_array_equal(out, want.T)
