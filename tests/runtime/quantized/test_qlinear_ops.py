"""Quantized ONNX's QOperator ops against onnxruntime, on one-node models with random int8/uint8 data.

onnxruntime requantizes in float and memplan with TFLite's fixed-point multipliers, so an element
may differ by one quantization step where the real value sits at a rounding tie; each test reports
how many elements differ and asserts that none differs by more than one step and few differ at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.kernels import TensorMeta, call, get_kernel

ort = pytest.importorskip("onnxruntime")

ONNX_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}  # fmt: skip


def run_both(op, inputs, attrs=None, domain="", out_dtype=np.int8, constants=()):
    """onnxruntime's and memplan's outputs of one `op` node on `inputs` (a list of arrays or None)."""
    attrs = attrs or {}
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    inits = [
        numpy_helper.from_array(np.asarray(v), name=names[k])
        for k, v in enumerate(inputs)
        if v is not None and k in constants
    ]
    feeds = {names[k]: v for k, v in enumerate(inputs) if v is not None and k not in constants}
    graph_inputs = [
        helper.make_tensor_value_info(n, ONNX_TYPES[np.asarray(v).dtype], np.asarray(v).shape) for n, v in feeds.items()
    ]
    node = helper.make_node(op, names, ["y"], domain=domain, **attrs)
    y = helper.make_tensor_value_info("y", ONNX_TYPES[np.dtype(out_dtype)], None)
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "one", graph_inputs, [y], inits), opset_imports=opsets)
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    k = get_kernel(op, domain)
    assert k is not None
    out = np.full(expected.shape, 99, dtype=expected.dtype)
    values = [None if v is None else np.asarray(v) for v in inputs]
    ws = None
    if k.workspace is not None:
        metas = [None if v is None else TensorMeta(v.shape, v.dtype) for v in values]
        ws = np.zeros(k.workspace(metas, [TensorMeta(out.shape, out.dtype)], **attrs), dtype=np.uint8)
    call(k, values, [out], ws, attrs, 21)
    return expected, out


def assert_within_one_step(expected, got, what, max_share=0.02):
    diff = np.abs(expected.astype(np.int64) - got.astype(np.int64))
    differ = int((diff > 0).sum())
    print(f"{what}: {differ} of {diff.size} elements differ from onnxruntime, by at most {int(diff.max())} step")
    assert diff.max() <= 1, f"{what}: an element differs by {int(diff.max())} steps"
    assert differ <= max(1, max_share * diff.size), f"{what}: {differ} of {diff.size} elements differ"
    assert len(np.unique(expected)) >= 4, f"{what}: the oracle's output is nearly constant"


def _s(v):
    return np.array(v, dtype=np.float32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("group,per_channel,strides,pads,dilations", [
    (1, False, [1, 1], [1, 1, 1, 1], [1, 1]),
    (1, True, [2, 2], [0, 1, 1, 0], [1, 1]),
    (1, True, [1, 1], [2, 2, 2, 2], [2, 2]),
    (6, True, [1, 1], [1, 1, 1, 1], [1, 1]),
    ("depthwise", True, [2, 2], [1, 0, 2, 1], [1, 1]),
    ("depthwise", False, [1, 1], [2, 2, 2, 2], [2, 2]),
    (2, False, [2, 1], [0, 0, 0, 0], [1, 1]),
])  # fmt: skip
def test_qlinear_conv(dtype, group, per_channel, strides, pads, dilations):
    channels = 6 if group == "depthwise" else 12  # depthwise: one output channel per input channel
    group = 6 if group == "depthwise" else group
    rng = np.random.default_rng(group + len(pads))
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 6, 9, 8)).astype(dtype)
    w = rng.integers(-127, 128, (channels, 6 // group, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, channels).astype(np.float32) if per_channel else _s(0.005)
    bias = rng.integers(-2000, 2000, channels).astype(np.int32)
    x_zero = np.array(128 if dtype == np.uint8 else 3, dtype=dtype)
    inputs = [
        x,
        _s(0.02),
        x_zero,
        w,
        w_scale,
        np.zeros(w_scale.shape, np.int8),
        _s(0.15),
        np.array(7 if dtype == np.uint8 else -4, dtype=dtype),
        bias,
    ]
    attrs = {"group": group, "strides": strides, "pads": pads, "dilations": dilations, "kernel_shape": [3, 3]}
    expected, got = run_both("QLinearConv", inputs, attrs, constants=range(1, 9), out_dtype=dtype)
    assert_within_one_step(expected, got, f"QLinearConv group={group}")


@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(per_column):
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (3, 7, 40)).astype(np.uint8)
    b = rng.integers(-127, 128, (40, 10)).astype(np.int8)
    b_scale = rng.uniform(0.002, 0.01, 10).astype(np.float32) if per_column else _s(0.004)
    inputs = [
        a,
        _s(0.03),
        np.array(120, np.uint8),
        b,
        b_scale,
        np.zeros(b_scale.shape, np.int8),
        _s(0.2),
        np.array(100, np.uint8),
    ]
    expected, got = run_both("QLinearMatMul", inputs, constants=range(1, 8), out_dtype=np.uint8)
    assert_within_one_step(expected, got, "QLinearMatMul")


def test_qgemm():
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (5, 30)).astype(np.int8)
    b = rng.integers(-127, 128, (12, 30)).astype(np.int8)
    c = rng.integers(-3000, 3000, 12).astype(np.int32)
    inputs = [a, _s(0.03), np.array(2, np.int8), b, _s(0.004), np.array(0, np.int8), c, _s(0.2), np.array(-3, np.int8)]
    expected, got = run_both("QGemm", inputs, {"transB": 1}, domain="com.microsoft", constants=range(1, 9))
    assert_within_one_step(expected, got, "QGemm")


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("broadcast", [False, True])
def test_qlinear_binary(op, dtype, broadcast):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (2, 4, 5, 6)).astype(dtype)
    b = rng.integers(info.min, info.max + 1, (1, 4, 1, 1) if broadcast else a.shape).astype(dtype)
    za, zb, zy = (np.array(v if dtype == np.uint8 else v - 128, dtype) for v in (130, 120, 128))
    scale_y = 0.06 if op == "QLinearAdd" else 0.3
    inputs = [a, _s(0.05), za, b, _s(0.03), zb, _s(scale_y), zy]
    expected, got = run_both(op, inputs, domain="com.microsoft", out_dtype=dtype, constants=(1, 2, 4, 5, 6, 7))
    # TFLite's add rounds each rescaled input and then the sum, onnxruntime once: more near-ties.
    assert_within_one_step(expected, got, op, max_share=0.08 if op == "QLinearAdd" else 0.02)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_unary(op, attrs):
    rng = np.random.default_rng(8)
    x = rng.integers(0, 256, (3, 50)).astype(np.uint8)
    inputs = [
        x,
        _s(0.05),
        np.array(128, np.uint8),
        _s(0.01 if op == "QLinearSigmoid" else 0.04),
        np.array(20, np.uint8),
    ]
    expected, got = run_both(op, inputs, attrs, domain="com.microsoft", out_dtype=np.uint8, constants=(1, 2, 3, 4))
    assert_within_one_step(expected, got, op)


def test_qlinear_global_average_pool():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (2, 16, 7, 7)).astype(np.uint8)
    inputs = [x, _s(0.05), np.array(128, np.uint8), _s(0.01), np.array(120, np.uint8)]
    expected, got = run_both(
        "QLinearGlobalAveragePool", inputs, domain="com.microsoft", out_dtype=np.uint8, constants=(1, 2, 3, 4)
    )
    assert_within_one_step(expected, got, "QLinearGlobalAveragePool")


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_qlinear_average_pool(count_include_pad):
    rng = np.random.default_rng(10)
    x = rng.integers(-128, 128, (1, 5, 9, 9)).astype(np.int8)
    inputs = [x, _s(0.05), np.array(3, np.int8), _s(0.03), np.array(-2, np.int8)]
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": count_include_pad}
    expected, got = run_both("QLinearAveragePool", inputs, attrs, domain="com.microsoft", constants=(1, 2, 3, 4))
    assert_within_one_step(expected, got, "QLinearAveragePool")


def test_qlinear_concat():
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)
    b = rng.integers(0, 256, (1, 5, 4, 4)).astype(np.uint8)
    inputs = [
        _s(0.05),
        np.array(128, np.uint8),
        a,
        _s(0.05),
        np.array(128, np.uint8),
        b,
        _s(0.08),
        np.array(100, np.uint8),
    ]
    expected, got = run_both(
        "QLinearConcat", inputs, {"axis": 1}, domain="com.microsoft", out_dtype=np.uint8, constants=(0, 1, 3, 4, 6, 7)
    )
    assert_within_one_step(expected, got, "QLinearConcat")


@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_linear(per_axis):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((2, 4, 5)) * 3).astype(np.float32)
    scale = rng.uniform(0.01, 0.05, 4).astype(np.float32) if per_axis else _s(0.03)
    zero = np.full(scale.shape, 5, np.int8)
    expected, got = run_both("QuantizeLinear", [x, scale, zero], {"axis": 1}, constants=(1, 2))
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(expected)) > 20
    q = rng.integers(-128, 128, (2, 4, 5)).astype(np.int8)
    expected, got = run_both("DequantizeLinear", [q, scale, zero], {"axis": 1}, out_dtype=np.float32, constants=(1, 2))
    np.testing.assert_array_equal(got, expected)
