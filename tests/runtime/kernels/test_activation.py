"""Activation fast paths against onnx's reference evaluator: Relu against a row of zeros
(lengths around the row size, in place, NaN and infinities, dtypes without a zero row); Gelu
(exact and tanh) and (Log)Softmax against onnxruntime, with their declared workspace full of
garbage, without one, and in place."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime.kernels import TensorMeta, attributes_of, call, get_kernel
from runtime.kernels.activation import ZERO_ROW
from runtime.kernels.fused import activation
from tests.runtime.kernels.harness import close, one_node, run_ort, run_with_workspace

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


def _run_in_place(model, x: np.ndarray) -> np.ndarray:
    """The node's kernel with `out` being `x`'s own memory and the declared workspace filled with garbage."""
    node = model.graph.node[0]
    k = get_kernel(node.op_type)
    attrs = attributes_of(node)
    y = x.copy()
    meta = [TensorMeta(tuple(x.shape), x.dtype)]
    ws = np.full(k.workspace(meta, meta, **attrs), 0xFF, np.uint8)
    opset = model.opset_import[0].version
    call(k, [y], [y], ws, attrs, opset)
    return y


@pytest.mark.parametrize("shape", [(1, 128, 1536), (3, 7, 5), (1,), (40000,), (2, 3, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime_with_workspace_and_in_place(shape, dtype, approximate) -> None:
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    if x.size >= 4:
        x.reshape(-1)[:4] = [0.0, -40.0, 40.0, -1e-30]
    model = one_node("Gelu", {"x": x}, opset=20, approximate=approximate)
    # onnxruntime has no float64 Gelu: onnx's reference evaluator is the oracle there.
    expected = run_ort(model, {"x": x}) if dtype == np.float32 else ReferenceEvaluator(model).run(None, {"x": x})
    got, _ = run_with_workspace(model, [x], expected, "exact")
    close(got, expected, rtol=1e-5, atol=1e-6)
    close([_run_in_place(model, x)], expected, rtol=1e-5, atol=1e-6)
    close(run_with_workspace(model, [x], expected, "none")[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize(("shape", "axis"), [((2, 12, 33, 17), -1), ((2, 12, 33, 17), 1), ((3, 5, 70000), 2),
                                             ((5, 3000, 9), 1), ((7,), 0), ((4, 6), None)])  # fmt: skip
def test_softmax_matches_onnxruntime_on_axes_opsets_and_in_place(op, opset, shape, axis) -> None:
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    model = one_node(op, {"x": x}, opset=opset, **attrs)
    expected = run_ort(model, {"x": x})
    got, _ = run_with_workspace(model, [x], expected, "exact")
    close(got, expected, rtol=1e-5, atol=1e-6)
    close([_run_in_place(model, x)], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 50000), (7,), (3, 0)])
def test_erf_matches_onnxruntime_with_workspace_and_in_place(shape, dtype) -> None:
    # Both branches (|x| below and above 0.5), tiny arguments (relative accuracy), saturation.
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    if x.size >= 6:
        x.reshape(-1)[:6] = [0.0, 1e-20, -3e-4, 0.49999, 0.5, -30.0]
    model = one_node("Erf", {"x": x}, opset=13)
    expected = run_ort(model, {"x": x}) if dtype == np.float32 else ReferenceEvaluator(model).run(None, {"x": x})
    got, _ = run_with_workspace(model, [x], expected, "exact")
    close(got, expected, rtol=1e-6, atol=0)
    close([_run_in_place(model, x)], expected, rtol=1e-6, atol=0)


def test_exponentials_taken_as_exp2_stay_within_float32_rounding_over_its_range():
    """Sigmoid, a fused Silu and Softmax take exp(x) as exp2(x log2 e): checked against float64
    exp from where the results underflow to where they saturate, with infinities and NaN. The
    rounding of x log2 e grows with |x|: 4e-6 relative at |x| = 80 (on results near 1e-35)."""
    x = np.concatenate([np.linspace(-80, 80, 100_001), [-np.inf, np.inf, np.nan]]).astype(np.float32)
    wide = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sigmoid = 1 / (1 + np.exp(-wide))
        silu = wide * sigmoid  # NaN at -inf, as x * Sigmoid(x) is
    got = np.empty_like(x)
    kernel = get_kernel("Sigmoid")
    assert kernel is not None
    kernel.fn(x, out=got)
    np.testing.assert_allclose(got, sigmoid, rtol=5e-6, atol=1e-36)
    y = x.copy()
    activation("Silu", np.dtype(np.float32))(y, np.empty(1 << 16, np.float32))
    np.testing.assert_allclose(y, silu, rtol=5e-6, atol=1e-36)
    rows = np.linspace(-60, 60, 4 * 301, dtype=np.float32).reshape(4, 301)
    shifted = rows.astype(np.float64) - rows.max(axis=1, keepdims=True)
    want = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    softmax = get_kernel("Softmax")
    assert softmax is not None and softmax.workspace is not None
    meta = [TensorMeta(rows.shape, rows.dtype)]
    out = np.empty_like(rows)
    softmax.fn(rows, out=out, ws=np.empty(softmax.workspace(meta, meta), np.uint8), opset=17)
    np.testing.assert_allclose(out, want, rtol=5e-6, atol=1e-36)


def test_softmax_over_a_mask_of_the_float32_minimum_warns_nothing():
    """A causal mask written as float32's minimum: x - max times log2 e overflows to -inf, which
    exp2 makes 0, silently (a warning would also allocate beside the arena)."""
    import warnings

    rows = np.random.default_rng(3).standard_normal((2, 3, 7)).astype(np.float32)
    rows[:, :, 4:] = np.finfo(np.float32).min
    shifted = rows.astype(np.float64) - rows.max(axis=-1, keepdims=True)
    want = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    softmax = get_kernel("Softmax")
    assert softmax is not None and softmax.workspace is not None
    meta = [TensorMeta(rows.shape, rows.dtype)]
    out = np.empty_like(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        softmax.fn(rows, out=out, ws=np.empty(softmax.workspace(meta, meta), np.uint8), opset=17)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=0)
    assert not out[:, :, 4:].any()
