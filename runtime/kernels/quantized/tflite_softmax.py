"""SOFTMAX over the last axis: int8 in, int8 out (scale 1/256, zero point -128) with TFLite's
fixed-point exp and reciprocal (gemmlowp's formats), and float32 with `beta`.

An 8-bit input's difference to its row's maximum takes one of 256 values, so the bound call works
out the fixed-point exp of each once at prepare (`exp_table`), as TFLM's kernels precompute theirs;
a run then only sums table entries and takes one reciprocal per row."""

from __future__ import annotations

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import kernel
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.common import TFLITE, quant

SCALED_DIFF_BITS = 5  # integer bits of the scaled input differences
ACCUMULATION_BITS = 12  # integer bits of the sum of exps


def exp_table(beta: float, input_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the differences 0, -1, ..., -255 to a row's maximum: whether each counts (>= diff_min),
    its fixed-point exp, and its term of the sum (the exp scaled to ACCUMULATION_BITS; 0 if not counted)."""
    multiplier, left, diff_min = qa.softmax_parameters(float(np.float32(beta)), input_scale, SCALED_DIFF_BITS)
    diff = -np.arange(256, dtype=np.int64)
    valid = diff >= diff_min
    exps = qa.exp_on_negative_values(qa.multiply_greater_than_one(diff, multiplier, left), SCALED_DIFF_BITS)
    terms = np.where(valid, qa.rounding_divide_by_pot(exps, ACCUMULATION_BITS), 0)
    return valid, exps, terms


def bind_softmax(inputs, outputs, attrs, general):
    """8-bit rows through `exp_table`, made once for the node."""
    x, y = inputs[0], outputs[0]
    if x is None or y is None or x.dtype.itemsize != 1 or x.dtype.kind not in "iu":
        return None
    qi = quant(attrs.get("q_inputs"), 0, "input")
    valid, exps, terms = exp_table(float(attrs.get("beta", 1.0)), float(qi.scale[0]))
    depth = x.shape[-1]
    lo, hi = qa.dtype_range(y.dtype)
    bits = 31 - 8 * y.dtype.itemsize

    def run(x, *_, out, **__):
        rows = x.reshape(-1, depth)
        index = rows.max(axis=1, keepdims=True).astype(np.intp) - rows  # 0..255: the difference, negated
        total = qa.wrap32(terms[index].sum(axis=1, keepdims=True))
        scale, bits_over_unit = qa.reciprocal(total, ACCUMULATION_BITS)
        value = qa.rounding_divide_by_pot(qa.srdhm(scale, exps[index]), bits_over_unit + bits) + lo
        out.reshape(-1, depth)[...] = np.where(valid[index], np.clip(value, lo, hi), lo)

    return Bound(run)


@kernel("SOFTMAX", domain=TFLITE, bind=bind_softmax)
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
