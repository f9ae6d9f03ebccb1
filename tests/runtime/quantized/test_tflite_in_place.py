"""memplan's integer kernels with their output written over their own input, against TensorFlow Lite Micro.

The compiled CONV_2D, DEPTHWISE_CONV_2D and PAD routes declare that their output may start at their
input's first byte (`Planes.over`), which the planner then uses. Each case checks that the planner
would take the alias (the kernel's declaration holds for these shapes), then runs the kernel with
its output a view of the input's own bytes (larger or smaller than the input), and compares every
element with the `tflite-micro` interpreter's output for the same one-operator model and input.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.kernels import JIT_ENABLED, TensorMeta, call, get_kernel
from tests.runtime.quantized.test_tflite_ops import conv_case
from tests.runtime.quantized.tflite_ops import Tensor, one_op_model, q, run_kernel, run_tflm

pytest.importorskip("tflite_micro")
pytestmark = pytest.mark.skipif(not JIT_ENABLED, reason="the in-place routes are the compiled loops'")

I8 = np.int8


def run_over(op, inputs, outputs, options, x):
    """The kernel's output written from the first byte of its input `x` (one buffer for both)."""
    k = get_kernel(op, "tflite")
    attrs = {**options, "q_inputs": tuple(t.quant for t in inputs), "q_outputs": tuple(t.quant for t in outputs)}
    metas_in = [TensorMeta(tuple(t.shape), np.dtype(t.dtype)) for t in inputs]
    metas_out = [TensorMeta(tuple(t.shape), np.dtype(t.dtype)) for t in outputs]
    assert k.planes is not None and k.planes.overlaps(attrs, metas_in, metas_out[0]), f"{op} not planned over its input"
    memory = np.full(max(x.nbytes, metas_out[0].nbytes), 55, np.uint8)
    view_in = memory[: x.nbytes].view(x.dtype).reshape(x.shape)
    view_in[...] = x
    out = memory[: metas_out[0].nbytes].view(metas_out[0].dtype).reshape(metas_out[0].shape)
    ws = np.zeros(k.workspace(metas_in, metas_out, **attrs), np.uint8) if k.workspace else None
    values = [view_in if t.data is None else t.data for t in inputs]
    call(k, values, [out], ws, attrs, 0)
    return out.copy()


def check_over(op, inputs, outputs, options, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, inputs[0].shape).astype(I8)
    expected = run_tflm(one_op_model(op, inputs, outputs, options), [x])[0]
    got = run_over(op, inputs, outputs, options, x)
    differ = int((got != expected).sum())
    assert differ == 0, f"{op}: {differ} of {got.size} elements differ from TFLM"
    assert len(np.unique(expected)) >= 4, f"{op}: the oracle's output is nearly constant; the case tests nothing"


OPTIONS = {"fused_activation_function": "NONE", "dilation_w_factor": 1, "dilation_h_factor": 1}

CONVS = [  # input shape, kernel, stride, padding, output hw, output channels: rows taken forward or backward
    ((1, 12, 10, 8), (1, 1), 1, "VALID", (12, 10), 24),  # channels grow x3: backward, as vMCU
    ((1, 12, 10, 24), (1, 1), 1, "VALID", (12, 10), 8),  # channels shrink: forward
    ((1, 12, 10, 8), (3, 3), 1, "SAME", (12, 10), 8),  # a row of lag in the ring
    ((1, 12, 10, 4), (3, 3), 2, "SAME", (6, 5), 16),
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[1]}s{c[2]}c{c[0][3]}to{c[5]}")
def test_conv_2d_over_its_input(case):
    shape, kernel_hw, stride, padding, out_hw, channels = case
    inputs, outputs = conv_case(np.random.default_rng(4), shape, out_hw, channels, kernel_hw, True)
    options = {**OPTIONS, "padding": padding, "stride_w": stride, "stride_h": stride}
    check_over("CONV_2D", inputs, outputs, options)


DEPTHWISE = [  # input shape, kernel, stride, padding, output hw, multiplier
    ((1, 12, 10, 8), (3, 3), 1, "SAME", (12, 10), 1),
    ((1, 14, 12, 8), (3, 3), 2, "VALID", (6, 5), 1),
    ((1, 49, 40, 1), (10, 8), 2, "SAME", (25, 20), 8),  # micro_speech's first layer
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: f"{c[1]}s{c[2]}m{c[5]}")
def test_depthwise_over_its_input(case):
    shape, kernel_hw, stride, padding, out_hw, multiplier = case
    inputs, outputs = conv_case(
        np.random.default_rng(5), shape, out_hw, 0, kernel_hw, True, depthwise=True, multiplier=multiplier
    )
    options = {**OPTIONS, "padding": padding, "stride_w": stride, "stride_h": stride, "depth_multiplier": multiplier}
    check_over("DEPTHWISE_CONV_2D", inputs, outputs, options)


def test_pad_over_its_input():
    pads = Tensor((4, 2), np.int32, None, np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32))
    x_q = q(0.05, 9)
    check_over("PAD", [Tensor((1, 6, 5, 3), I8, x_q), pads], [Tensor((1, 9, 8, 3), I8, x_q)], {})


def test_a_model_plans_its_convolutions_over_their_inputs():
    """A whole shared model: the planner takes the kernels' word (some conv output is aliased onto
    its input), and the arena is below the sum of the two largest activations it would hold apart."""
    from pathlib import Path

    import runtime

    path = Path(__file__).resolve().parents[4] / "shared" / "models" / "tflite" / "person_detect.tflite"
    if not path.exists():
        pytest.skip("person_detect.tflite is not in ../shared/models/tflite/")
    graph = runtime.load_model(path.read_bytes())
    problem = runtime.memory_problem(graph, runtime.MemoryOptions())
    produced = {n.outputs[0]: n for n in graph.nodes if n.outputs}
    aliased = [b.id for b in problem.buffers if b.alias_of and b.id in produced]
    assert any(produced[name].op_type in ("CONV_2D", "DEPTHWISE_CONV_2D") for name in aliased)


def test_conv_sums_stay_exact_at_the_float32_bound():
    """512 taps of the largest int8 products (x - zero = 255, w = -128 or 127): sums within a step of
    2**24, the most the float32 route takes, must equal TFLM's int32 sums after requantization."""
    rng = np.random.default_rng(9)
    negatives = [512, 500, 470, 300, 256, 200, 60, 0]  # taps of -128 per channel: sums across +-2**24
    w = np.full((8, 1, 1, 512), 127, I8)
    for c, k in enumerate(negatives):
        w[c, 0, 0, :k] = -128
    w[:, 0, 0, 511] = rng.integers(-127, 127, 8)  # sums of every parity
    scales = np.full(8, 0.001)
    inputs = [
        Tensor((1, 2, 2, 512), I8, q(0.05, -128)),
        Tensor(w.shape, I8, q(scales, 0, 0), w),
        Tensor((8,), np.int32, q(scales * 0.05, 0, 0), rng.integers(-3, 4, 8).astype(np.int32)),
    ]
    outputs = [Tensor((1, 2, 2, 8), I8, q(6.6, 0))]
    options = {**OPTIONS, "padding": "VALID", "stride_w": 1, "stride_h": 1}
    x = np.full((1, 2, 2, 512), 127, I8)
    expected = run_tflm(one_op_model("CONV_2D", inputs, outputs, options), [x])[0]
    got = run_kernel("CONV_2D", inputs, outputs, options, [x])[0]
    assert np.array_equal(got, expected), f"{got[0, 0, 0]} != {expected[0, 0, 0]}"
    assert len(np.unique(expected)) >= 6  # the channels' sums spread over the int8 range


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("padding,stride,filt,out_hw", [("SAME", 2, 3, (5, 5)), ("VALID", 1, 2, (8, 8))])
def test_pool_over_its_input(op, padding, stride, filt, out_hw):
    x_q = q(0.05, 3)
    options = {"padding": padding, "stride_w": stride, "stride_h": stride, "filter_width": filt,
               "filter_height": filt, "fused_activation_function": "NONE"}  # fmt: skip
    check_over(op, [Tensor((1, 9, 9, 6), I8, x_q)], [Tensor((1, *out_hw, 6), I8, x_q)], options)
