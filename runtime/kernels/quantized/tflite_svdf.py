"""SVDF (TFLite's rank-decomposed time filter, keyword spotting's layer): int8 with TFLite Micro's
integer arithmetic, and float32, over one step.

The activation state (a variable tensor of ``n_filter x n_memory`` per batch row, input 4) is the
layer's memory of the last ``n_memory`` steps. As in TensorFlow Lite Micro, each call shifts every
filter's memory left by one, writes the feature filters' new column last, filters the memory over
time and writes the shifted memory back into the state, in place: a `runtime.Session` keeps the
state from run to run (`Session.reset_state` clears it), so consecutive runs are consecutive
invocations. A state handed over read-only is read and left as it was (one invocation on a freshly
reset interpreter). The workspace holds the shifted memory (in the state's dtype) and one sum per
batch row and filter (int64, or float32 for a float SVDF).
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.common import TFLITE, float_activation, quant


def _real(*scales: np.float32) -> float:
    # TFLite multiplies and divides the float32 scales in float32, then widens.
    a, b, c = (np.float32(s) for s in scales)
    return float(a * b / c)


def _blocks(x, weights_feature, weights_time, state) -> list:
    batches, n_filter, n_memory = x.shape[0], weights_feature.shape[0], weights_time.shape[1]
    sums = np.float32 if x.dtype.kind == "f" else np.int64
    return [((batches, n_filter, n_memory), state.dtype), ((batches, n_filter), sums)]


def svdf_workspace(inputs, outputs, **_) -> int:
    return scratch_bytes(*_blocks(inputs[0], inputs[1], inputs[2], inputs[4]))


def _shifted(state: np.ndarray, memory: np.ndarray, newest: np.ndarray) -> None:
    """`memory` (B, F, M) <- each filter's memory in `state` shifted left by one, `newest` (B, F) last."""
    old = state.reshape(memory.shape)
    memory[:, :, :-1] = old[:, :, 1:]
    memory[:, :, -1] = newest


@kernel("SVDF", domain=TFLITE, workspace=svdf_workspace)
def svdf(x, weights_feature, weights_time, bias, state, *, out, ws, rank=1, fused_activation_function="NONE",
         q_inputs=None, q_outputs=None, **_):  # fmt: skip
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
