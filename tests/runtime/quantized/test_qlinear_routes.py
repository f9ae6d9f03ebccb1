"""QLinearConv's compiled routes ("gemm", "depthwise") and the compiled QLinearAdd/Mul and table
lookups against onnxruntime, each run with exactly its declared workspace; the exact-sum chunks of
the gemm route; and a small QOperator model through a Session (constants prepared once)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.kernels import TensorMeta
from runtime.kernels.quantized import qlinear_routes as routes
from tests.runtime.quantized.test_qlinear_ops import assert_within_one_step, run_both

ort = pytest.importorskip("onnxruntime")


def _s(v) -> np.ndarray:
    return np.array(v, dtype=np.float32)


compiled_only = pytest.mark.skipif(not routes.ON, reason="compiled loops off: QLinearConv takes its numpy route")


def _conv_inputs(rng, dtype, channels_in, channels_out, group, kernel, per_channel=True, w_extreme=False):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, channels_in, 9, 10)).astype(dtype)
    shape = (channels_out, channels_in // group, *kernel)
    w = (rng.choice([-127, 127], shape) if w_extreme else rng.integers(-127, 128, shape)).astype(np.int8)
    fan_in = channels_in // group * int(np.prod(kernel))
    w_scale = (rng.uniform(0.5, 1.5, channels_out) if per_channel else np.ones(1)).astype(np.float32) * 0.3 / fan_in
    x_zero = np.array(131 if dtype == np.uint8 else -5, dtype=dtype)
    bias = rng.integers(-3000, 3000, channels_out).astype(np.int32)
    y_zero = np.array(120 if dtype == np.uint8 else 4, dtype=dtype)
    w_zero = np.zeros(w_scale.shape, np.int8)
    return [x, _s(0.05), x_zero, w, w_scale, w_zero, _s(0.04 if not w_extreme else 0.5), y_zero, bias]


def _route(inputs, attrs) -> str:
    x, w = inputs[0], inputs[3]
    expected, _ = run_shapes(inputs, attrs)
    shape = routes.QConvShape.of(TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype), expected, attrs)
    return shape.route[1].name


def run_shapes(inputs, attrs):
    """The output's meta, by onnxruntime's shape rules (run once), and its output."""
    expected, got = run_both("QLinearConv", inputs, attrs, constants=range(1, 9), out_dtype=inputs[0].dtype)
    return TensorMeta(expected.shape, expected.dtype), (expected, got)


@compiled_only
@pytest.mark.parametrize("case", [
    dict(dtype=np.int8, cin=8, cout=12, group=1, kernel=(1, 1), attrs={}),
    dict(dtype=np.uint8, cin=6, cout=10, group=1, kernel=(3, 3), attrs={"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    dict(dtype=np.int8, cin=9, cout=6, group=3, kernel=(1, 1), attrs={}),
    dict(dtype=np.uint8, cin=3, cout=8, group=1, kernel=(7, 7), attrs={"strides": [2, 2], "pads": [3, 3, 3, 3]},
         per_channel=False),
    dict(dtype=np.int8, cin=4, cout=8, group=2, kernel=(3, 3), attrs={"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
])  # fmt: skip
def test_gemm_route_matches_onnxruntime(case):
    rng = np.random.default_rng(case["cin"] * 10 + case["cout"])
    inputs = _conv_inputs(rng, case["dtype"], case["cin"], case["cout"], case["group"], case["kernel"],
                          case.get("per_channel", True))  # fmt: skip
    attrs = {"group": case["group"], "kernel_shape": list(case["kernel"]), **case["attrs"]}
    meta, (expected, got) = run_shapes(inputs, attrs)
    x, w = inputs[0], inputs[3]
    shape = routes.QConvShape.of(TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype), meta, attrs)
    assert shape.route[1].name == "gemm"
    assert_within_one_step(expected, got, f"QLinearConv gemm {case['kernel']} group={case['group']}")


@compiled_only
def test_gemm_route_sums_exactly_over_depth_chunks():
    """Filters of +-127 over 128 channels x 3x3 taps: a row's sum of |w| times 128 is 2**24 * 1.1,
    so the product runs in two float32 chunks added in float64, and still matches onnxruntime."""
    rng = np.random.default_rng(3)
    inputs = _conv_inputs(rng, np.int8, 128, 4, 1, (3, 3), w_extreme=True)
    inputs[0] = np.where(rng.random(inputs[0].shape) < 0.5, -128, 127).astype(np.int8)  # sums near the bound
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    filters = inputs[3].reshape(4, -1).astype(np.float32)
    assert routes.depth_chunks(filters, 128).size == 3
    _, (expected, got) = run_shapes(inputs, attrs)
    assert_within_one_step(expected, got, "QLinearConv gemm in depth chunks")


def test_depth_chunks_are_exact_and_maximal():
    rng = np.random.default_rng(4)
    filters = rng.integers(-255, 256, (5, 3000)).astype(np.float32)
    bounds = routes.depth_chunks(filters, 255)
    assert bounds[0] == 0 and bounds[-1] == 3000 and np.all(np.diff(bounds) > 0)
    for k0, k1 in zip(bounds[:-1], bounds[1:], strict=True):
        assert 255 * np.abs(filters[:, k0:k1]).sum(axis=1).max() <= 2**24
        if k1 < 3000:  # one more column would pass the bound for some row
            assert 255 * np.abs(filters[:, k0 : k1 + 1]).sum(axis=1).max() > 2**24
    whole = routes.depth_chunks(filters[:, :2970], 255, step=9, most=252)  # whole channels of 3x3 taps
    assert whole[-1] == 2970 and np.all(whole % 9 == 0) and np.all(np.diff(whole) <= 252)
    pairs = zip(whole[:-1], whole[1:], strict=True)
    assert all(255 * np.abs(filters[:, k0:k1]).sum(axis=1).max() <= 2**24 for k0, k1 in pairs)


@compiled_only
@pytest.mark.parametrize("dtype,strides,dilations,pads,w_zero", [
    (np.int8, [1, 1], [1, 1], [1, 1, 1, 1], 0),
    (np.uint8, [2, 2], [1, 1], [0, 1, 1, 0], 0),
    (np.int8, [2, 1], [2, 2], [2, 2, 2, 2], 0),
    (np.uint8, [1, 1], [1, 1], [1, 1, 1, 1], 9),
])  # fmt: skip
def test_depthwise_route_matches_onnxruntime(dtype, strides, dilations, pads, w_zero):
    rng = np.random.default_rng(5)
    inputs = _conv_inputs(rng, dtype, 8, 8, 8, (3, 3))
    if w_zero:  # a uint8 filter with its own zero point
        inputs[3] = rng.integers(0, 256, inputs[3].shape).astype(np.uint8)
        inputs[5] = np.full(inputs[4].shape, w_zero, np.uint8)
    attrs = {"group": 8, "kernel_shape": [3, 3], "strides": strides, "dilations": dilations, "pads": pads}
    meta, (expected, got) = run_shapes(inputs, attrs)
    x, w = inputs[0], inputs[3]
    assert (
        routes.QConvShape.of(TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype), meta, attrs).route[1].name
        == "depthwise"
    )
    assert_within_one_step(expected, got, "QLinearConv depthwise")


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("shapes", [((3, 7, 5), (7, 1)), ((7, 1), (3, 7, 5)), ((2, 1, 6, 5), (1, 3, 1, 5))])
def test_binary_with_axes_stretched(op, shapes):
    """Either input stretched along an axis of one, of three and four dimensions."""
    rng = np.random.default_rng(6)
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in shapes)
    scale_y = _s(0.07 if op == "QLinearAdd" else 0.3)
    inputs = [a, _s(0.05), np.array(2, np.int8), b, _s(0.04), np.array(-3, np.int8), scale_y, np.array(1, np.int8)]
    expected, got = run_both(op, inputs, domain="com.microsoft", constants=(1, 2, 4, 5, 6, 7))
    assert_within_one_step(expected, got, f"{op} {shapes}", max_share=0.08)


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name=name)


def test_qoperator_model_in_a_session_matches_onnxruntime(tmp_path):
    """QLinearConv's gemm and depthwise routes, QLinearAdd and QLinearSigmoid through a Session, whose
    constants hooks prepare each node's filters, tables and chunks once; every op reads the graph's
    input but the add (the depthwise output at twice its step, so that a step there stays under one)."""
    import runtime
    from runtime.session import Session

    rng = np.random.default_rng(7)
    q = lambda name, scale, zero: [_init(f"{name}_s", _s(scale)), _init(f"{name}_z", np.array(zero, np.uint8))]  # noqa: E731
    inits = q("x", 0.05, 128) + q("a", 0.08, 120) + q("b", 0.06, 130) + q("c", 0.12, 125) + q("y", 1 / 256, 0)
    inits += [
        _init("w1", rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)), _init("w1_s", _s(np.full(8, 0.004))),
        _init("w1_z", np.zeros(8, np.int8)), _init("b1", rng.integers(-500, 500, 8).astype(np.int32)),
        _init("w2", rng.integers(-127, 128, (4, 1, 3, 3)).astype(np.int8)), _init("w2_s", _s(np.full(4, 0.01))),
        _init("w2_z", np.zeros(4, np.int8)),
    ]  # fmt: skip
    ms = "com.microsoft"
    nodes = [
        helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w1", "w1_s", "w1_z", "a_s", "a_z", "b1"], ["a"],
                         pads=[1, 1, 1, 1]),
        helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w2", "w2_s", "w2_z", "b_s", "b_z"], ["b"], group=4,
                         pads=[1, 1, 1, 1]),
        helper.make_node("QLinearAdd", ["x", "x_s", "x_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"], domain=ms),
        helper.make_node("QLinearSigmoid", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"], domain=ms),
    ]  # fmt: skip
    shapes = {"a": [1, 8, 10, 11], "b": [1, 4, 10, 11], "c": [1, 4, 10, 11], "y": [1, 4, 10, 11]}
    graph = helper.make_graph(
        nodes, "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 10, 11])],
        [helper.make_tensor_value_info(n, TensorProto.UINT8, shape) for n, shape in shapes.items()], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ms, 1)])
    model.ir_version = 10
    path = tmp_path / "qop.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.integers(0, 256, (1, 4, 10, 11)).astype(np.uint8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    expected = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = Session(runtime.load_model(path))
    got = session.run({"x": x})
    assert session.constant_bytes > 0
    for name, want in zip(shapes, expected, strict=True):
        assert_within_one_step(want, np.asarray(got[name]), f"{name} in a session", max_share=0.08)


@compiled_only
def test_branch_free_requantize_is_tflites_multiply_by_quantized_multiplier():
    from runtime import quant_arith as qa
    from runtime.kernels.quantized.jit_qlinear import SCALED

    rng = np.random.default_rng(8)
    x = np.concatenate([rng.integers(-(2**31), 2**31, 1500), rng.integers(-5000, 5000, 500), [-(2**31), 2**31 - 1, 0]])
    for multiplier, shift in [(2**30, -19), (1374389535, -5), (2**31 - 1, 0), (1500000000, -31), (1500000000, 2)]:
        want = qa.multiply_by_quantized_multiplier(x, multiplier, shift)
        got = np.array([SCALED(np.int64(v), np.int64(multiplier), np.int64(shift)) for v in x])
        np.testing.assert_array_equal(got, want, err_msg=f"multiplier {multiplier}, shift {shift}")


@compiled_only
@pytest.mark.parametrize("dtype,trans_b,depth,per_column,bias", [
    (np.uint8, 1, 1300, True, True),
    (np.int8, 0, 40, False, False),
    (np.int8, 1, 700, True, True),
])  # fmt: skip
def test_qgemm_route_matches_onnxruntime(dtype, trans_b, depth, per_column, bias):
    """QGemm's compiled route with a constant B: 1,300 taps of +-127 against uint8 inputs need depth
    chunks to stay exact."""
    from runtime.kernels.quantized.qlinear_gemm import takes

    rng = np.random.default_rng(depth)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, (3, depth)).astype(dtype)
    b = rng.choice([-127, 127], (12, depth) if trans_b else (depth, 12)).astype(np.int8)
    b_scale = _s((rng.uniform(0.5, 1.5, 12) if per_column else 1.0) * 0.01 / np.sqrt(depth))
    c = rng.integers(-3000, 3000, 12).astype(np.int32) if bias else None
    a_zero = np.array(133 if dtype == np.uint8 else -4, dtype)
    y_zero = np.array(120 if dtype == np.uint8 else 3, dtype)
    inputs = [a, _s(0.03), a_zero, b, b_scale, np.zeros(b_scale.shape, np.int8), c, _s(0.2), y_zero]
    metas = [None if v is None else TensorMeta(np.shape(v), np.asarray(v).dtype) for v in inputs]
    assert takes(metas, [TensorMeta((3, 12), np.dtype(dtype))])
    constants = [k for k in range(1, 9) if inputs[k] is not None]
    expected, got = run_both("QGemm", inputs, {"transB": trans_b}, domain="com.microsoft", out_dtype=dtype,
                             constants=constants)  # fmt: skip
    assert_within_one_step(expected, got, f"QGemm depth {depth}")


@pytest.mark.parametrize("dtype,attrs", [
    (np.uint8, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (np.int8, {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0], "count_include_pad": 1}),
    (np.int8, {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
])  # fmt: skip
def test_average_pools_match_onnxruntime(dtype, attrs):
    """QLinearAveragePool (uneven pads, ceil mode, padding counted or not) and QLinearGlobalAveragePool,
    two images: the compiled pools where they are on, the numpy ones elsewhere."""
    rng = np.random.default_rng(9)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 5, 9, 11)).astype(dtype)
    zeros = [np.array(v if dtype == np.uint8 else v - 128, dtype) for v in (131, 120)]
    inputs = [x, _s(0.05), zeros[0], _s(0.03), zeros[1]]
    for op, node_attrs in (("QLinearAveragePool", attrs), ("QLinearGlobalAveragePool", {})):
        expected, got = run_both(op, inputs, node_attrs, "com.microsoft", out_dtype=dtype, constants=(1, 2, 3, 4))
        assert_within_one_step(expected, got, f"{op} {node_attrs}", max_share=0.05)


@compiled_only
def test_compiled_requantize_is_tflites():
    """The requantizing pass against quant_arith's MultiplyByQuantizedMultiplier, per channel, over
    float32 and int32 sums, small and past 2**22, with multipliers under and over one."""
    from runtime import quant_arith as qa
    from runtime.kernels.quantized.jit_conv_int import channel_table
    from runtime.kernels.quantized.jit_qlinear import REQUANTIZE

    rng = np.random.default_rng(10)
    limits = np.array([2**10, 2**16, 2**21 - 2**19, 2**23, 2**24, 40])
    multiplier, shift = qa.quantize_multiplier(100.0 / limits)
    bias = np.array([rng.integers(-n // 4, n // 4 + 1) for n in limits])
    sums = np.stack([rng.integers(-n, n + 1, 300) for n in limits]).astype(np.float32)
    for acc, dtype in ((sums, np.int8), (sums.astype(np.int32), np.uint8)):
        lo, hi = qa.dtype_range(dtype)
        out = np.zeros((6, 300), dtype)
        REQUANTIZE(acc, channel_table(bias, multiplier, shift, 5, lo, hi, 6), 0, out)
        want = qa.requantize(acc.astype(np.int64) + bias[:, None], multiplier[:, None], shift[:, None], 5, lo, hi)
        np.testing.assert_array_equal(out, want)
        assert len(np.unique(want)) > 50


@compiled_only
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_one_by_one_depthwise_scales_channels_as_onnxruntime(dtype):
    """A 1x1 depthwise QLinearConv (a folded batch norm: one scale per channel) through the depthwise
    route's integer pass, with and without a bias."""
    rng = np.random.default_rng(11)
    for bias in (True, False):
        inputs = _conv_inputs(rng, dtype, 6, 6, 6, (1, 1))
        inputs[4] = inputs[4] / 40  # one tap of products up to 2**15: a smaller scale keeps the outputs spread
        if not bias:
            inputs = inputs[:8]
        attrs = {"group": 6, "kernel_shape": [1, 1]}
        meta, (expected, got) = run_shapes(inputs, attrs)
        x, w = inputs[0], inputs[3]
        shape = routes.QConvShape.of(TensorMeta(x.shape, x.dtype), TensorMeta(w.shape, w.dtype), meta, attrs)
        assert shape.route[1].name == "depthwise" and shape.route[1].workspace(shape, shape.route[0]) == 0
        assert_within_one_step(expected, got, f"1x1 depthwise QLinearConv, bias {bias}")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_quantize_linear_in_chunks_matches_onnxruntime(dtype):
    """QuantizeLinear with one scale, a chunk at a time in its workspace (more elements than a chunk):
    exactly onnxruntime's integers, ties to even, values past the range and infinities included
    (saturated); a NaN (its integer is the implementation's choice) becomes the least value."""
    from runtime.kernels.quantized.quantize import QUANTIZE_CHUNK, quantize_linear

    rng = np.random.default_rng(12)
    x = (rng.standard_normal(QUANTIZE_CHUNK + 1004) * 4).astype(np.float32)
    x[:50] = np.arange(-25, 25, dtype=np.float32) * 0.025 + 0.0125  # exact ties at scale 0.025
    x[50:62] = [1e9, -1e9, 3.3e5, -3.3e5, 7.0, -7.0, 0.0, -0.0, 1e30, -1e30, np.inf, -np.inf]
    zero = np.array(128 if dtype == np.uint8 else -3, dtype)
    expected, got = run_both("QuantizeLinear", [x.reshape(2, -1), _s(0.025), zero], constants=(1, 2),
                             out_dtype=dtype)  # fmt: skip
    np.testing.assert_array_equal(got, expected)
    nan = np.full(5, np.nan, np.float32)
    out = np.zeros(5, dtype)
    quantize_linear(nan, _s(0.5), zero, out=out, ws=np.zeros(64, np.uint8))
    assert (out == np.iinfo(dtype).min).all()
