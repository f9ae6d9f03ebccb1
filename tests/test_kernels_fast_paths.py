"""The executor's fast paths against onnx's reference evaluator: Relu against a row of zeros
(lengths around the row size, in place, NaN and infinities, dtypes without a zero row) and
Conv's per-shape route cache (the same kernel called with lists and tuples, shapes changing)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, get_kernel
from runtime.kernels.activation import ZERO_ROW
from runtime.kernels.conv import conv, conv_workspace

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


def _reference_conv(x, w, b, **attrs) -> np.ndarray:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info(n, f, a.shape) for n, a in (("x", x), ("w", w), ("b", b))],
        [helper.make_tensor_value_info("y", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    return ReferenceEvaluator(model).run(None, {"x": x, "w": w, "b": b})[0]


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 8, 6, 6), (4, 8, 1, 1), {"strides": [1, 1]}),  # pointwise: one matmul
        ((2, 8, 7, 7), (6, 8, 1, 1), {"strides": [2, 2]}),  # strided 1x1: im2col
        ((1, 8, 9, 9), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # taps
        ((1, 4, 9, 9), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # im2col, padded
        ((1, 6, 8, 8), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),  # depthwise
    ],
)
def test_conv_routes_match_reference_across_repeated_calls(x_shape, w_shape, attrs) -> None:
    """Each route twice, with attributes as lists then tuples, another shape between: the cached
    route of one shape never leaks into another."""
    rng = np.random.default_rng(len(x_shape) + w_shape[0])
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    for spatial in (x_shape[2], x_shape[2] + 2, x_shape[2]):
        x = rng.standard_normal((*x_shape[:2], spatial, spatial)).astype(np.float32)
        want = _reference_conv(x, w, b, **attrs)
        for form in (list, tuple):
            given = {k: form(v) if isinstance(v, list) else v for k, v in attrs.items()}
            metas = [TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype)]
            nbytes = conv_workspace(metas, [TensorMeta(want.shape, want.dtype)], **given)
            ws = np.empty(nbytes, np.uint8) if nbytes else None
            out = np.empty_like(want)
            conv(x, w, b, out=out, ws=ws, **given)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def _reference_pool(op_type: str, x: np.ndarray, **attrs) -> np.ndarray:
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", f, x.shape)], [helper.make_tensor_value_info("y", f, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.mark.parametrize("op_type", ["AveragePool", "MaxPool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [7, 7]},  # the whole image: one reduction per channel
        {"kernel_shape": [7, 7], "pads": [1, 1, 1, 1]},  # padded: the general path
        {"kernel_shape": [6, 7]},  # smaller than the image: the general path
        {"kernel_shape": [7, 7], "count_include_pad": 1},
    ],
)
def test_pool_over_the_whole_image_matches_reference(op_type: str, attrs: dict) -> None:
    if op_type == "MaxPool" and "count_include_pad" in attrs:
        pytest.skip("count_include_pad is an AveragePool attribute")
    x = np.random.default_rng(3).standard_normal((2, 5, 7, 7)).astype(np.float32)
    want = _reference_pool(op_type, x, **attrs)
    k = get_kernel(op_type)
    metas = [TensorMeta(x.shape, x.dtype)]
    nbytes = k.workspace(metas, [TensorMeta(want.shape, want.dtype)], **attrs)
    ws = np.empty(nbytes, np.uint8) if nbytes else None
    out = np.full_like(want, np.nan)
    k.fn(x, out=(out,) if k.multi_output else out, ws=ws, **attrs)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
