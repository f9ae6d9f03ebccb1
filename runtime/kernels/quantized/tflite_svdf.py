"""SVDF (TFLite's rank-decomposed time filter, keyword spotting's layer), int8 with TFLite Micro's
integer arithmetic, over one step.

The activation state (a variable tensor of ``n_filter x n_memory`` per batch row) is an input the
kernel reads and never writes: each run filters over time the state shifted left by one (read in
place through a strided view, no copy) with the feature filters' new column last, as one invocation
of TensorFlow Lite Micro does on a freshly reset interpreter. The state carried from run to run is
not kept. Its workspace is one int64 sum per batch row and filter.
"""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.common import TFLITE, quant


def _real(*scales: np.float32) -> float:
    # TFLite multiplies and divides the float32 scales in float32, then widens.
    a, b, c = (np.float32(s) for s in scales)
    return float(a * b / c)


def svdf_workspace(inputs, outputs, **_) -> int:
    return scratch_bytes(((inputs[0].shape[0], inputs[1].shape[0]), np.int64))


@kernel("SVDF", domain=TFLITE, workspace=svdf_workspace)
def svdf(x, weights_feature, weights_time, bias, state, *, out, ws, rank=1, q_inputs=None, q_outputs=None, **_):
    if x.dtype.kind == "f":
        raise ValueError("SVDF: float32 SVDF has no kernel yet; accepted: int8 input with int8 or int16 state")
    q_in, q_wf = quant(q_inputs, 0, "input"), quant(q_inputs, 1, "input")
    q_wt, q_state, q_out = quant(q_inputs, 2, "input"), quant(q_inputs, 4, "input"), quant(q_outputs, 0, "output")
    batches, n_filter, n_memory = x.shape[0], weights_feature.shape[0], weights_time.shape[1]
    state_zero = int(q_state.zero_point[0])
    lo, hi = qa.dtype_range(state.dtype)
    m1, s1 = qa.quantize_multiplier(_real(q_in.scale[0], q_wf.scale[0], q_state.scale[0]))
    m2, s2 = qa.quantize_multiplier(_real(q_state.scale[0], q_wt.scale[0], q_out.scale[0]))
    filtered = Scratch(ws, "SVDF").take((batches, n_filter), np.int64)
    features = (x.astype(np.int64) - int(q_in.zero_point[0])) @ weights_feature.astype(np.int64).T
    column = np.clip(qa.multiply_by_quantized_multiplier(features, m1, s1), lo, hi) + state_zero
    newest = column.astype(state.dtype).astype(np.int64) - state_zero  # C++'s narrowing store wraps like the cast
    # The flat state shifted left by one: filter f's memory is elements f*M+1 .. f*M+M-1, then the new column.
    flat = state.reshape(batches, -1)
    older = np.lib.stride_tricks.as_strided(
        flat[:, 1:], (batches, n_filter, n_memory - 1), (flat.strides[0], n_memory * flat.strides[1], flat.strides[1])
    )
    taps = weights_time[:, : n_memory - 1]
    np.einsum("bfm,fm->bf", older, taps, out=filtered, dtype=np.int64, casting="unsafe")
    filtered -= state_zero * taps.sum(axis=1, dtype=np.int64)
    filtered += newest * weights_time[:, n_memory - 1].astype(np.int64)
    units = filtered.reshape(batches, n_filter // rank, rank).sum(axis=2)
    if bias is not None:
        units = units + bias.astype(np.int64)
    out_lo, out_hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(qa.multiply_by_quantized_multiplier(units, m2, s2) + int(q_out.zero_point[0]), out_lo, out_hi)
