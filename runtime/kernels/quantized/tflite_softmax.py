"""SOFTMAX over the last axis: int8 in, int8 out (scale 1/256, zero point -128) with TFLite's
fixed-point exp and reciprocal (gemmlowp's formats), and float32 with `beta`."""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels.quantized.common import TFLITE, quant

SCALED_DIFF_BITS = 5  # integer bits of the scaled input differences
ACCUMULATION_BITS = 12  # integer bits of the sum of exps


@kernel("SOFTMAX", domain=TFLITE)
def softmax(x, *, out, beta=1.0, q_inputs=None, q_outputs=None, **_):
    if x.dtype.kind == "f":
        shifted = (x - x.max(axis=-1, keepdims=True)) * np.float32(beta)
        np.exp(shifted, out=out)
        out /= out.sum(axis=-1, keepdims=True)
        return
    qi = quant(q_inputs, 0, "input")
    multiplier, left, diff_min = qa.softmax_parameters(float(np.float32(beta)), float(qi.scale[0]), SCALED_DIFF_BITS)
    depth = x.shape[-1]
    rows = x.reshape(-1, depth).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    valid = diff >= diff_min
    scaled = qa.multiply_greater_than_one(diff, multiplier, left)
    exps = qa.exp_on_negative_values(scaled, SCALED_DIFF_BITS)
    total = qa.wrap32(np.where(valid, qa.rounding_divide_by_pot(exps, ACCUMULATION_BITS), 0).sum(axis=1, keepdims=True))
    scale, bits_over_unit = qa.reciprocal(total, ACCUMULATION_BITS)
    lo, hi = qa.dtype_range(out.dtype)
    exponent = bits_over_unit + 31 - 8 * out.dtype.itemsize
    value = qa.rounding_divide_by_pot(qa.srdhm(scale, exps), exponent) + lo
    out.reshape(-1, depth)[...] = np.where(valid, np.clip(value, lo, hi), lo)
