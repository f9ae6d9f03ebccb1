"""SVDF (TFLite's rank-decomposed time filter, keyword spotting's layer): int8 with TFLite Micro's
integer arithmetic, and float32, over one step.

The activation state (a variable tensor of ``n_filter x n_memory`` per batch row, input 4) is the
layer's memory of the last ``n_memory`` steps. As in TensorFlow Lite Micro, each call shifts every
filter's memory left by one, writes the feature filters' new column last, filters the memory over
time and writes the shifted memory back into the state, in place: a `runtime.Session` keeps the
state from run to run (`Session.reset_state` clears it), so consecutive runs are consecutive
invocations. A state handed over read-only is read and left as it was (one invocation on a freshly
reset interpreter). An integer SVDF runs as one compiled loop (`jit_svdf`) that shifts the state
where it lies and needs no workspace; the numpy route (float32, or without numba) shifts the
memory into its workspace, with one sum per batch row and filter (int64, or float32).
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.common import TFLITE, float_activation, quant
from runtime.kernels.quantized.jit_svdf import SVDF


def _real(*scales: np.float32) -> float:
    # TFLite multiplies and divides the float32 scales in float32, then widens.
    a, b, c = (np.float32(s) for s in scales)
    return float(a * b / c)


def _blocks(x, weights_feature, weights_time, state) -> list:
    batches, n_filter, n_memory = x.shape[0], weights_feature.shape[0], weights_time.shape[1]
    sums = np.float32 if x.dtype.kind == "f" else np.int64
    return [((batches, n_filter, n_memory), state.dtype), ((batches, n_filter), sums)]


def svdf_workspace(inputs, outputs, **_) -> int:
    if SVDF is not None and inputs[0].dtype.kind in "iu":
        return 0  # the compiled loop shifts the state where it lies and sums in registers
    return scratch_bytes(*_blocks(inputs[0], inputs[1], inputs[2], inputs[4]))


def _shifted(state: np.ndarray, memory: np.ndarray, newest: np.ndarray) -> None:
    """`memory` (B, F, M) <- each filter's memory in `state` shifted left by one, `newest` (B, F) last."""
    old = state.reshape(memory.shape)
    memory[:, :, :-1] = old[:, :, 1:]
    memory[:, :, -1] = newest


def _multipliers(q_inputs, q_outputs):
    q_in, q_wf = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input")
    q_wt, q_state, q_out = quant(q_inputs, 2, "input"), quant(q_inputs, 4, "input"), quant(q_outputs, 0, "output")
    feature = qa.quantize_multiplier(_real(q_in.scale[0], q_wf.scale[0], q_state.scale[0]))
    output = qa.quantize_multiplier(_real(q_state.scale[0], q_wt.scale[0], q_out.scale[0]))
    return q_in, q_state, q_out, feature, output


def _arguments(bias, state_dtype, out_dtype, rank, q_inputs, q_outputs) -> tuple:
    """The compiled loop's arguments but the arrays it reads and writes, worked out once."""
    q_in, q_state, q_out, feature, output = _multipliers(q_inputs, q_outputs)
    return (
        bias if bias is not None else np.zeros(1, np.int32), bias is not None, int(q_in.zero_point[0]),
        np.array([int(feature[0][0]), int(feature[1][0])], np.int64), int(q_state.zero_point[0]),
        *qa.dtype_range(state_dtype), np.array([int(output[0][0]), int(output[1][0])], np.int64),
        int(q_out.zero_point[0]), *qa.dtype_range(out_dtype), int(rank),
    )  # fmt: skip


def svdf_constants(values, inputs, outputs, rank=1, q_inputs=None, q_outputs=None, **_) -> dict:
    if (
        SVDF is None
        or inputs[0].dtype.kind not in "iu"
        or (len(values) > 3 and inputs[3] is not None and values[3] is None)
    ):
        return {}
    bias = values[3] if len(values) > 3 else None
    return {"prepared": _arguments(bias, inputs[4].dtype, outputs[0].dtype, rank, q_inputs, q_outputs)}


def _compiled(x, weights_feature, weights_time, bias, state, out, rank, q_inputs, q_outputs, prepared):
    """The compiled route; a state handed over read-only is shifted in a copy, and left as it was."""
    flat = state.reshape(state.shape[0], -1) if state.flags.writeable else state.reshape(state.shape[0], -1).copy()
    args = prepared or _arguments(bias, state.dtype, out.dtype, rank, q_inputs, q_outputs)
    bias_array, has_bias, x_zero, *rest = args
    SVDF(x, weights_feature, weights_time, bias_array, has_bias, flat, x_zero, *rest, out)


def svdf_prepare(inputs, outputs, rank=1, q_inputs=None, q_outputs=None, **_) -> None:
    """The compiled loop compiled (or loaded from numba's cache) at prepare, not in the first run:
    one call on zeros of the node's shapes and dtypes, which give the same signature."""
    if SVDF is None or inputs[0].dtype.kind not in "iu":
        return
    x, wf, wt, bias, state = (None if m is None else np.zeros(m.shape, m.dtype) for m in inputs)
    for read in (x, wf, wt, bias):  # as a session hands them over: read-only views and constants
        if read is not None:
            read.flags.writeable = False
    out = np.zeros(outputs[0].shape, outputs[0].dtype)
    _compiled(x, wf, wt, bias, state, out, rank, q_inputs, q_outputs, None)


@kernel("SVDF", domain=TFLITE, workspace=svdf_workspace, constants=svdf_constants, prepare=svdf_prepare)
def svdf(x, weights_feature, weights_time, bias, state, *, out, ws, rank=1, fused_activation_function="NONE",
         q_inputs=None, q_outputs=None, prepared=None, **_):  # fmt: skip
    if SVDF is not None and x.dtype.kind in "iu":
        _compiled(x, weights_feature, weights_time, bias, state, out, rank, q_inputs, q_outputs, prepared)
        return
    batches, n_filter = x.shape[0], weights_feature.shape[0]
    scratch = Scratch(ws, "SVDF")
    memory, filtered = (scratch.take(*block) for block in _blocks(x, weights_feature, weights_time, state))
    if x.dtype.kind == "f":
        _shifted(state, memory, x @ weights_feature.T)
        np.einsum("bfm,fm->bf", memory, weights_time, out=filtered)
        units = filtered.reshape(batches, n_filter // rank, rank).sum(axis=2)
        if bias is not None:
            units += bias
        out[...] = units
        float_activation(out, fused_activation_function)
    else:
        _integer(x, weights_feature, weights_time, bias, state, memory, filtered, out, rank, q_inputs, q_outputs)
    if state.flags.writeable:
        state.reshape(memory.shape)[...] = memory


def _integer(x, weights_feature, weights_time, bias, state, memory, filtered, out, rank, q_inputs, q_outputs):
    """TensorFlow Lite Micro's integer SVDF; its fused activation is not applied (TFLite Micro's isn't)."""
    q_in, q_wf = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input")
    q_wt, q_state, q_out = quant(q_inputs, 2, "input"), quant(q_inputs, 4, "input"), quant(q_outputs, 0, "output")
    batches, n_filter = x.shape[0], weights_feature.shape[0]
    state_zero = int(q_state.zero_point[0])
    lo, hi = qa.dtype_range(state.dtype)
    m1, s1 = qa.quantize_multiplier(_real(q_in.scale[0], q_wf.scale[0], q_state.scale[0]))
    m2, s2 = qa.quantize_multiplier(_real(q_state.scale[0], q_wt.scale[0], q_out.scale[0]))
    features = (x.astype(np.int64) - int(q_in.zero_point[0])) @ weights_feature.astype(np.int64).T
    column = np.clip(qa.multiply_by_quantized_multiplier(features, m1, s1), lo, hi) + state_zero
    _shifted(state, memory, column.astype(state.dtype))  # C++'s narrowing store wraps like the cast
    np.einsum("bfm,fm->bf", memory, weights_time, out=filtered, dtype=np.int64, casting="unsafe")
    filtered -= state_zero * weights_time.sum(axis=1, dtype=np.int64)
    units = filtered.reshape(batches, n_filter // rank, rank).sum(axis=2)
    if bias is not None:
        units = units + bias.astype(np.int64)
    out_lo, out_hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(qa.multiply_by_quantized_multiplier(units, m2, s2) + int(q_out.zero_point[0]), out_lo, out_hi)
