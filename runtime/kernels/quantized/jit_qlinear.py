"""Compiled loops of the quantized ONNX routes (NCHW, 8-bit), when the compiled loops are on:

* `COLUMNS`: a band of output rows' im2col columns of one image, as float32 straight from the
  8-bit input (the padding filled with the input's zero point), for float32 BLAS;
* `REQUANTIZE`: a band of integer-valued float sums (float32 or float64) to the output's integers
  with TFLite's MultiplyByQuantizedMultiplier per channel, bias before, zero point and clamp after;
  `ACCUMULATE` adds a depth chunk's float32 sums into a float64 band;
* `DEPTHWISE`: a depthwise convolution summed in float32 a row at a time (exact: at most 256 taps of
  products under 2**16) and requantized as it goes, so that its only scratch is one output row;
* `ADD`, `MUL`, `LOOKUP`: QLinearAdd and QLinearMul over 4-D (broadcast) views and a 256-entry table
  per element, each one pass where numpy takes a temporary per step of the arithmetic.

The requantization table `q` is `jit_conv_int.channel_table`'s: bias, multiplier and shift per
channel, then (zero point, lo, hi).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.kernels._jit import compiled
from runtime.kernels.conv.jit_winograd_shared import unsigned
from runtime.kernels.quantized.jit_conv_int import MBQM, TAP_RANGE


def _columns(x, fill, geo, kh, kw, r0, r1, cols):  # pragma: no cover - compiled
    """cols[(c * kh + ky) * kw + kx, (oy - r0) * ow + ox] = x[c, iy, ix] (`fill` in the padding)."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    channels, height, width = x.shape
    ow = cols.shape[1] // (r1 - r0)
    pad = np.float32(fill)
    for c in range(channels):
        for ky in range(kh):
            for kx in range(kw):
                row = (c * kh + ky) * kw + kx
                shift = kx * dil_w - left
                first, last = TAP_RANGE(shift, stride_w, ow, width)  # columns whose tap is inside
                for oy in range(r0, r1):
                    base = (oy - r0) * ow
                    iy = oy * stride_h - top + ky * dil_h
                    if iy < 0 or iy >= height:
                        for ox in range(ow):
                            cols[row, base + ox] = pad
                        continue
                    for ox in range(first):
                        cols[row, base + ox] = pad
                    source, target = x[c, iy], cols[row]
                    for ox in range(first, last):
                        target[unsigned(base + ox)] = source[unsigned(ox * stride_w + shift)]
                    for ox in range(last, ow):
                        cols[row, base + ox] = pad


def _requantize(acc, q, c0, out):  # pragma: no cover - compiled
    """out[c, p] = clamp(MBQM(acc[c, p] + bias[c0 + c]) + zero) for a band of channels from c0."""
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    for c in range(acc.shape[0]):
        b, m, s = q[0, c0 + c], q[1, c0 + c], q[2, c0 + c]
        for p in range(acc.shape[1]):
            value = MBQM(np.int64(acc[c, p]) + b, m, s) + zero
            out[c, p] = min(max(value, lo), hi)


def _accumulate(acc, part, first):  # pragma: no cover - compiled
    for c in range(acc.shape[0]):
        for p in range(acc.shape[1]):
            acc[c, p] = part[c, p] if first else acc[c, p] + part[c, p]


def _depthwise(x, xz, w, q, geo, out, acc):  # pragma: no cover - compiled
    """`x` (C, H, W), `w` (C, KH, KW) float32 less its zero point, `out` (C, OH, OW), `acc` float32 (OW,)."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    channels, height, width = x.shape
    kh, kw = w.shape[1], w.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    zero, lo, hi = q[3, 0], q[3, 1], q[3, 2]
    for c in range(channels):
        b, m, s = q[0, c], q[1, c], q[2, c]
        for oy in range(oh):
            acc[:] = 0
            for ky in range(kh):
                iy = oy * stride_h - top + ky * dil_h
                if iy < 0 or iy >= height:
                    continue  # the padding adds nothing: the input there is its zero point
                for kx in range(kw):
                    weight = w[c, ky, kx]
                    shift = kx * dil_w - left
                    first, last = TAP_RANGE(shift, stride_w, ow, width)
                    row = x[c, iy]
                    for ox in range(first, last):  # unsigned indexes: no wraparound checks, vectorised
                        acc[unsigned(ox)] += (np.float32(row[unsigned(ox * stride_w + shift)]) - xz) * weight
            for ox in range(ow):
                value = MBQM(np.int64(acc[ox]) + b, m, s) + zero
                out[c, oy, ox] = min(max(value, lo), hi)


def _add(a, b, table_a, table_b, q, out):  # pragma: no cover - compiled
    """TFLite's ADD: each input's rescaled value from its table (indexed by value + 128 for int8, by
    value for uint8: `q[5]`), the sum scaled by (q[0], q[1]), then zero point q[2] and clamp q[3..4]."""
    offset = q[5]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            for k in range(out.shape[2]):
                for n in range(out.shape[3]):
                    raw = table_a[np.int64(a[i, j, k, n]) + offset] + table_b[np.int64(b[i, j, k, n]) + offset]
                    value = MBQM(raw, q[0], q[1]) + q[2]
                    out[i, j, k, n] = min(max(value, q[3]), q[4])


def _mul(a, b, zeros, q, out):  # pragma: no cover - compiled
    """``clamp(MBQM((a - za) * (b - zb)) + zero)``: zeros = (za, zb), q as `_add`'s."""
    za, zb = zeros[0], zeros[1]
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            for k in range(out.shape[2]):
                for n in range(out.shape[3]):
                    product = (np.int64(a[i, j, k, n]) - za) * (np.int64(b[i, j, k, n]) - zb)
                    value = MBQM(product, q[0], q[1]) + q[2]
                    out[i, j, k, n] = min(max(value, q[3]), q[4])


def _lookup(x, table, offset, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = table[np.int64(x[i]) + offset]


# Any: each is None with compiled loops off, which its callers check once (`qlinear_routes.ON`, ...)
COLUMNS: Any = compiled(_columns)
REQUANTIZE: Any = compiled(_requantize)
ACCUMULATE: Any = compiled(_accumulate)
DEPTHWISE: Any = compiled(_depthwise)
ADD: Any = compiled(_add)
MUL: Any = compiled(_mul)
LOOKUP: Any = compiled(_lookup)
