"""TensorFlow Lite Micro's integer SVDF compiled (numba, when the compiled loops are on), in place
as TFLM runs it: each batch row's activation state shifted left by one, each filter's new feature
requantized into its memory's last slot, then the time filter, the rank sum, the bias and the
output's requantization. The same arithmetic as the numpy route of
`runtime.kernels.quantized.tflite_svdf`, which the tests compare with TFLM bit for bit; no
workspace: every sum lives in a register, and the state is shifted where it lies (outside the arena).
"""

from __future__ import annotations

import numpy as np

from runtime.kernels._jit import compiled
from runtime.kernels.quantized.jit_conv_int import MBQM


def _svdf(x, weights_feature, weights_time, bias, has_bias, state, x_zero, feature_scale, state_zero, state_lo,
          state_hi, output_scale, out_zero, out_lo, out_hi, rank, out):  # pragma: no cover - compiled  # fmt: skip
    """`feature_scale` and `output_scale` are (multiplier, shift) pairs; `state` is (batch, filters x memory)."""
    batches, depth = x.shape
    filters, memory = weights_time.shape
    for b in range(batches):
        for k in range(filters * memory - 1):
            state[b, k] = state[b, k + 1]
        for f in range(filters):
            dot = np.int64(0)
            for c in range(depth):
                dot += np.int64(weights_feature[f, c]) * (np.int64(x[b, c]) - x_zero)
            dot = min(max(MBQM(dot, feature_scale[0], feature_scale[1]), state_lo), state_hi)
            state[b, f * memory + memory - 1] = state_zero + dot  # a narrowing store, as C++'s
        for u in range(filters // rank):
            acc = bias[u] if has_bias else np.int64(0)
            for f in range(u * rank, u * rank + rank):
                for j in range(memory):
                    acc += np.int64(weights_time[f, j]) * (np.int64(state[b, f * memory + j]) - state_zero)
            value = MBQM(acc, output_scale[0], output_scale[1]) + out_zero
            out[b, u] = min(max(value, out_lo), out_hi)


SVDF = compiled(_svdf)
