"""memplan's TFLite integer kernels against TensorFlow Lite Micro's reference kernels, bit for bit.

Each case writes a one-operator int8 `.tflite` model (tests/runtime/quantized/tflite_ops.py), runs it
in the `tflite-micro` wheel's interpreter and runs memplan's kernel of the same builtin on the same
tensors: every output element must be equal. Inputs are random over the whole int8 range; the
outputs are checked to spread over many values, so a kernel that saturates everywhere cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, recorded_calls, run_kernel, run_tflm

pytest.importorskip("tflite_micro")

I8 = np.int8
ACTS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")


def _feeds(rng, inputs):
    out = []
    for t in inputs:
        if t.data is not None:
            continue
        if np.dtype(t.dtype).kind == "f":
            out.append(rng.standard_normal(t.shape).astype(np.float32) * 3)
        else:
            info = np.iinfo(t.dtype)
            out.append(rng.integers(info.min, info.max + 1, t.shape).astype(t.dtype))
    return out


def check(op, inputs, outputs, options, seed=0, spread=4):
    rng = np.random.default_rng(seed)
    feeds = _feeds(rng, inputs)
    expected = run_tflm(one_op_model(op, inputs, outputs, options), feeds)[0]
    got = run_kernel(op, inputs, outputs, options, feeds)[0]
    assert got.shape == expected.shape
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(got, expected)
    else:
        differ = int((got != expected).sum())
        assert differ == 0, (
            f"{op}: {differ} of {got.size} elements differ from TFLM (max {np.abs(got.astype(int) - expected).max()})"
        )
    assert len(np.unique(expected)) >= spread, f"{op}: the oracle's output is nearly constant; the case tests nothing"


def conv_case(rng, shape, out_hw, out_c, kernel, per_channel, depthwise=False, multiplier=1):
    channels = shape[3]
    w_shape = (1, *kernel, channels * multiplier) if depthwise else (out_c, *kernel, channels)
    n_out = w_shape[3] if depthwise else out_c
    w = rng.integers(-127, 128, w_shape).astype(I8)
    scales = rng.uniform(0.002, 0.02, n_out) if per_channel else np.array([0.01])
    axis = 3 if depthwise else 0
    x_q = q(0.05, int(rng.integers(-20, 20)))
    bias = rng.integers(-3000, 3000, n_out).astype(np.int32)
    bias_scale = np.broadcast_to(scales, (n_out,)) * 0.05
    inputs = [
        Tensor(shape, I8, x_q),
        Tensor(w_shape, I8, q(scales, 0, axis if per_channel else None), w),
        Tensor((n_out,), np.int32, q(bias_scale, 0, 0), bias),
    ]
    out_scale = float(np.sqrt(np.prod(kernel) * (channels if not depthwise else 1)) * 0.05 * scales.mean() * 40)
    outputs = [Tensor((shape[0], *out_hw, n_out), I8, q(out_scale, int(rng.integers(-10, 10))))]
    return inputs, outputs


CONV_CASES = [  # shape, kernel, stride, dilation, padding, out hw, per_channel, activation
    ((1, 9, 9, 5), (3, 3), 1, 1, "SAME", (9, 9), True, "NONE"),
    ((1, 9, 9, 5), (3, 3), 2, 1, "SAME", (5, 5), True, "RELU6"),
    ((2, 10, 8, 3), (3, 2), 2, 1, "VALID", (4, 4), False, "RELU"),
    ((1, 11, 11, 4), (3, 3), 1, 2, "SAME", (11, 11), True, "RELU_N1_TO_1"),
    ((1, 12, 12, 6), (1, 1), 1, 1, "VALID", (12, 12), True, "NONE"),
    ((1, 13, 9, 4), (5, 3), (2, 1), (1, 2), "VALID", (5, 5), True, "RELU"),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[1]}s{c[2]}d{c[3]}{c[4]}{'pc' if c[6] else 'pt'}{c[7]}")
def test_conv_2d(case):
    shape, kernel_hw, stride, dilation, padding, out_hw, per_channel, act = case
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    rng = np.random.default_rng(1)
    inputs, outputs = conv_case(rng, shape, out_hw, 7, kernel_hw, per_channel)
    options = {"padding": padding, "stride_w": sw, "stride_h": sh, "fused_activation_function": act,
               "dilation_w_factor": dw, "dilation_h_factor": dh}  # fmt: skip
    check("CONV_2D", inputs, outputs, options, spread=2 if act == "RELU_N1_TO_1" else 4)


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[1]}s{c[2]}d{c[3]}{c[4]}{'pc' if c[6] else 'pt'}{c[7]}")
@pytest.mark.parametrize("multiplier", [1, 2])
def test_depthwise_conv_2d(case, multiplier):
    shape, kernel_hw, stride, dilation, padding, out_hw, per_channel, act = case
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    rng = np.random.default_rng(2)
    inputs, outputs = conv_case(rng, shape, out_hw, 0, kernel_hw, per_channel, depthwise=True, multiplier=multiplier)
    options = {"padding": padding, "stride_w": sw, "stride_h": sh, "depth_multiplier": multiplier,
               "fused_activation_function": act, "dilation_w_factor": dw, "dilation_h_factor": dh}  # fmt: skip
    check("DEPTHWISE_CONV_2D", inputs, outputs, options, spread=2 if act == "RELU_N1_TO_1" else 4)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("act", ["NONE", "RELU"])
def test_fully_connected(per_channel, act):
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (9, 40)).astype(I8)
    scales = rng.uniform(0.002, 0.02, 9) if per_channel else np.array([0.01])
    inputs = [
        Tensor((3, 40), I8, q(0.05, 4)),
        Tensor(w.shape, I8, q(scales, 0, 0 if per_channel else None), w),
        Tensor(
            (9,), np.int32, q(np.broadcast_to(scales, (9,)) * 0.05, 0, 0), rng.integers(-3000, 3000, 9).astype(np.int32)
        ),
    ]
    check("FULLY_CONNECTED", inputs, [Tensor((3, 9), I8, q(0.2, -3))], {"fused_activation_function": act})


@pytest.mark.parametrize("op", ["ADD", "SUB", "MUL"])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("broadcast", [False, True])
def test_binary(op, act, broadcast):
    shape2 = (1, 1, 1, 6) if broadcast else (1, 5, 4, 6)
    inputs = [Tensor((1, 5, 4, 6), I8, q(0.05, 3)), Tensor(shape2, I8, q(0.031, -7))]
    out_scale = 0.05 if op == "MUL" else 0.04
    options = {"fused_activation_function": act}
    check(op, inputs, [Tensor((1, 5, 4, 6), I8, q(out_scale, 2))], options, spread=2 if act == "RELU_N1_TO_1" else 4)


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize(
    "padding,stride,filt,out_hw",
    [("SAME", 2, 3, (5, 5)), ("VALID", 2, 3, (4, 4)), ("SAME", 1, 2, (9, 9)), ("VALID", 1, 9, (1, 1))],
)
@pytest.mark.parametrize("act", ["NONE", "RELU6"])
def test_pool(op, padding, stride, filt, out_hw, act):
    options = {"padding": padding, "stride_w": stride, "stride_h": stride, "filter_width": filt,
               "filter_height": filt, "fused_activation_function": act}  # fmt: skip
    spread = 2 if out_hw == (1, 1) else 4
    check(op, [Tensor((1, 9, 9, 5), I8, q(0.05, 3))], [Tensor((1, *out_hw, 5), I8, q(0.05, 3))], options, spread=spread)


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("scale", [0.1, 0.02, 0.05])
def test_softmax(beta, scale):
    check("SOFTMAX", [Tensor((4, 13), I8, q(scale, 3))], [Tensor((4, 13), I8, q(1 / 256, -128))], {"beta": beta})


@pytest.mark.parametrize(
    "axes,out_shape,keep", [([1, 2], (1, 1, 1, 5), True), ([1, 2], (1, 5), False), ([3], (1, 7, 6, 1), True)]
)
@pytest.mark.parametrize("scales", [(0.05, 0.02), (0.05, 0.05)])
def test_mean(axes, out_shape, keep, scales):
    inputs = [Tensor((1, 7, 6, 5), I8, q(scales[0], 3)), Tensor((len(axes),), np.int32, None, np.array(axes, np.int32))]
    check("MEAN", inputs, [Tensor(out_shape, I8, q(scales[1], -1))], {"keep_dims": keep}, spread=3)


def test_quantize_from_float():
    check("QUANTIZE", [Tensor((5, 7), np.float32)], [Tensor((5, 7), I8, q(0.02, -1))], {})


def test_requantize():
    check("QUANTIZE", [Tensor((5, 7), I8, q(0.05, 3))], [Tensor((5, 7), I8, q(0.11, -1))], {})


def test_dequantize():
    check("DEQUANTIZE", [Tensor((5, 7), I8, q(0.05, 3))], [Tensor((5, 7), np.float32)], {})


def test_pad_fills_the_zero_point():
    pads = Tensor((4, 2), np.int32, None, np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32))
    check("PAD", [Tensor((1, 4, 4, 3), I8, q(0.05, 9)), pads], [Tensor((1, 7, 7, 3), I8, q(0.05, 9))], {})


def test_concatenation():
    inputs = [Tensor((1, 3, 3, 2), I8, q(0.05, 3)), Tensor((1, 3, 3, 4), I8, q(0.05, 3))]
    check(
        "CONCATENATION",
        inputs,
        [Tensor((1, 3, 3, 6), I8, q(0.05, 3))],
        {"axis": 3, "fused_activation_function": "NONE"},
    )


def test_reshape():
    shape = Tensor((2,), np.int32, None, np.array([4, 15], np.int32))
    check("RESHAPE", [Tensor((1, 3, 4, 5), I8, q(0.05, 3)), shape], [Tensor((4, 15), I8, q(0.05, 3))], {})


@pytest.mark.parametrize("scales", [(0.05, 0.05), (0.05, 0.03)])
def test_relu(scales):
    check("RELU", [Tensor((2, 40), I8, q(scales[0], 7))], [Tensor((2, 40), I8, q(scales[1], -20))], {})


def test_relu6():
    check("RELU6", [Tensor((2, 40), I8, q(0.03, -10))], [Tensor((2, 40), I8, q(0.03, -10))], {})


def test_split():
    inputs = [Tensor((1,), np.int32, None, np.array([3], np.int32)), Tensor((1, 4, 4, 6), I8, q(0.05, 3))]
    outputs = [Tensor((1, 4, 4, 2), I8, q(0.05, 3)) for _ in range(3)]
    feeds = _feeds(np.random.default_rng(5), inputs)
    model = one_op_model("SPLIT", inputs, outputs, {"num_splits": 3})
    expected = run_tflm(model, feeds, outputs=3)
    got = run_kernel("SPLIT", inputs, outputs, {"num_splits": 3}, feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("begin,end,strides,masks,out_shape", [
    ([0, 1, 0, 2], [1, 5, 6, 6], [1, 2, 1, 1], {}, (1, 2, 6, 4)),
    ([0, 0, 1, 0], [1, 0, 5, 6], [1, 1, 2, 3], {"end_mask": 2}, (1, 6, 2, 2)),
    ([0, 2, 0, 0], [1, 3, 6, 6], [1, 1, 1, 1], {"shrink_axis_mask": 2}, (1, 6, 6)),
])  # fmt: skip
def test_strided_slice(begin, end, strides, masks, out_shape):
    consts = [Tensor((4,), np.int32, None, np.array(v, np.int32)) for v in (begin, end, strides)]
    inputs = [Tensor((1, 6, 6, 6), I8, q(0.05, 3)), *consts]
    check("STRIDED_SLICE", inputs, [Tensor(out_shape, I8, q(0.05, 3))], masks)


@pytest.mark.parametrize("scale,zero", [(0.05, 3), (0.1, -20), (0.02, 0)])
def test_logistic(scale, zero):
    check("LOGISTIC", [Tensor((3, 50), I8, q(scale, zero))], [Tensor((3, 50), I8, q(1 / 256, -128))], {})


@pytest.mark.parametrize("scale,zero", [(0.05, 3), (0.1, -20), (0.02, 0)])
def test_tanh(scale, zero):
    check("TANH", [Tensor((3, 50), I8, q(scale, zero))], [Tensor((3, 50), I8, q(1 / 128, 0))], {})


def test_prelu_per_channel_slopes():
    alpha = np.random.default_rng(6).integers(-128, 128, (1, 1, 6)).astype(I8)
    inputs = [Tensor((1, 5, 4, 6), I8, q(0.05, 3)), Tensor(alpha.shape, I8, q(0.004, -2), alpha)]
    check("PRELU", inputs, [Tensor((1, 5, 4, 6), I8, q(0.04, -9))], {})


@pytest.mark.parametrize("in_q,out_q", [((0.05, 3), (0.03, -40)), ((0.1, -20), (0.06, -100)), ((0.02, 0), (0.01, -60))])
def test_hard_swish(in_q, out_q):
    check("HARD_SWISH", [Tensor((3, 50), I8, q(*in_q))], [Tensor((3, 50), I8, q(*out_q))], {})


@pytest.mark.parametrize("out_hw", [(10, 14), (3, 5), (7, 7)])
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_nearest_neighbor(out_hw, align, half):
    size = Tensor((2,), np.int32, None, np.array(out_hw, np.int32))
    options = {"align_corners": align, "half_pixel_centers": half}
    check(
        "RESIZE_NEAREST_NEIGHBOR",
        [Tensor((1, 5, 7, 3), I8, q(0.05, 3)), size],
        [Tensor((1, *out_hw, 3), I8, q(0.05, 3))],
        options,
    )


@pytest.mark.parametrize("out_hw", [(10, 14), (3, 5), (9, 6)])
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_bilinear(out_hw, align, half):
    size = Tensor((2,), np.int32, None, np.array(out_hw, np.int32))
    options = {"align_corners": align, "half_pixel_centers": half}
    check(
        "RESIZE_BILINEAR",
        [Tensor((1, 5, 7, 3), I8, q(0.05, 3)), size],
        [Tensor((1, *out_hw, 3), I8, q(0.05, 3))],
        options,
    )


@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_bilinear_float(align, half):
    size = Tensor((2,), np.int32, None, np.array((9, 11), np.int32))
    rng = np.random.default_rng(8)
    inputs, outputs = [Tensor((1, 5, 7, 3), np.float32), size], [Tensor((1, 9, 11, 3), np.float32)]
    options = {"align_corners": align, "half_pixel_centers": half}
    feeds = _feeds(rng, inputs)
    expected = run_tflm(one_op_model("RESIZE_BILINEAR", inputs, outputs, options), feeds)[0]
    got = run_kernel("RESIZE_BILINEAR", inputs, outputs, options, feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


F32 = np.float32


def _float_case(op):
    rng = np.random.default_rng(9)
    x = Tensor((1, 9, 9, 4), F32)
    conv = {"padding": "SAME", "stride_w": 2, "stride_h": 2, "dilation_w_factor": 1, "dilation_h_factor": 1,
            "fused_activation_function": "RELU6"}  # fmt: skip
    pool = {"padding": "SAME", "stride_w": 2, "stride_h": 2, "filter_width": 3, "filter_height": 3,
            "fused_activation_function": "NONE"}  # fmt: skip
    w = rng.standard_normal((6, 3, 3, 4)).astype(F32)
    dw = rng.standard_normal((1, 3, 3, 8)).astype(F32)
    fc = rng.standard_normal((5, 324)).astype(F32)
    bias = rng.standard_normal(8).astype(F32)
    cases = {
        "CONV_2D": ([x, Tensor(w.shape, F32, None, w), Tensor((6,), F32, None, bias[:6])], (1, 5, 5, 6), conv),
        "DEPTHWISE_CONV_2D": (
            [x, Tensor(dw.shape, F32, None, dw), Tensor((8,), F32, None, bias)],
            (1, 5, 5, 8),
            {**conv, "depth_multiplier": 2},
        ),  # fmt: skip
        "FULLY_CONNECTED": (
            [Tensor((1, 324), F32), Tensor(fc.shape, F32, None, fc)],
            (1, 5),
            {"fused_activation_function": "NONE"},
        ),  # fmt: skip
        "AVERAGE_POOL_2D": ([x], (1, 5, 5, 4), pool),
        "MAX_POOL_2D": ([x], (1, 5, 5, 4), pool),
        "ADD": ([x, Tensor((1, 1, 1, 4), F32)], (1, 9, 9, 4), {"fused_activation_function": "NONE"}),
        "MUL": ([x, Tensor((1, 9, 9, 4), F32)], (1, 9, 9, 4), {"fused_activation_function": "RELU_N1_TO_1"}),
        "SOFTMAX": ([Tensor((3, 17), F32)], (3, 17), {"beta": 0.7}),
        "MEAN": ([x, Tensor((2,), np.int32, None, np.array([1, 2], np.int32))], (1, 1, 1, 4), {"keep_dims": True}),
    }
    inputs, shape, options = cases[op]
    return inputs, [Tensor(shape, F32)], options


@pytest.mark.parametrize(
    "op",
    [
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "FULLY_CONNECTED",
        "AVERAGE_POOL_2D",
        "MAX_POOL_2D",
        "ADD",
        "MUL",
        "SOFTMAX",
        "MEAN",
    ],
)
def test_float_builtins(op):
    inputs, outputs, options = _float_case(op)
    feeds = _feeds(np.random.default_rng(10), inputs)
    expected = run_tflm(one_op_model(op, inputs, outputs, options), feeds)[0]
    got = run_kernel(op, inputs, outputs, options, feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    assert len(np.unique(expected)) > 3


def test_fully_connected_compiles_its_loop_at_prepare(monkeypatch):
    """FULLY_CONNECTED's compiled loop is called at prepare with arguments of the very types a run
    passes (numba compiles, or loads from its cache, one signature per set of types), so that no run
    compiles: the first run, traced, allocates next to nothing beside the arena."""
    from runtime.kernels.quantized import tflite_dense

    if tflite_dense.DENSE is None:
        pytest.skip("compiled loops are off (no numba, or MEMPLAN_JIT=0)")
    calls = recorded_calls(monkeypatch, tflite_dense, "DENSE")
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (9, 40)).astype(I8)
    inputs = [
        Tensor((3, 40), I8, q(0.05, 4)),
        Tensor(w.shape, I8, q(0.01), w),
        Tensor((9,), np.int32, q(0.0005), rng.integers(-3000, 3000, 9).astype(np.int32)),
    ]
    model = one_op_model("FULLY_CONNECTED", inputs, [Tensor((3, 9), I8, q(0.2, -3))], {})
    graph = runtime.load_model(model)
    session = runtime.Session(graph, program=False).prepare()  # the step loop's call (runtime.program: one call)
    assert len(calls) == 1, "the loop is called once at prepare"
    session.run({graph.inputs[0]: np.zeros((3, 40), I8)}, measure="memory")
    assert len(calls) == 2 and calls[0] == calls[1], calls
    assert session.stats.outside_arena_bytes < 32 << 10, session.stats.outside_arena_bytes
