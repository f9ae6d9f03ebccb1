"""A compiled depthwise convolution over 8-bit integers (NCHW, one output channel per input channel),
for QLinearConv's depthwise route when the compiled loops are on: it reads the image in place, skips
the taps that fall in the padding (they add nothing, the input there being its zero point), and sums
exactly in int64, in one pass where numpy takes four per tap."""

from __future__ import annotations

import numpy as np

from runtime.kernels._jit import compiled


def _depthwise_rows(x, zero, w, r0, r1, geometry, acc):  # pragma: no cover - compiled
    stride_h, stride_w, dil_h, dil_w, top, left = geometry
    channels, height, width = x.shape
    kh, kw = w.shape[1], w.shape[2]
    ow = acc.shape[1] // (r1 - r0)
    for c in range(channels):
        for p in range(acc.shape[1]):
            acc[c, p] = 0.0
        for ky in range(kh):
            for kx in range(kw):
                weight = w[c, ky, kx]
                shift = kx * dil_w - left
                # the output columns whose tap falls inside the image: 0 <= ox * stride_w + shift < width
                first = max(0, (-shift + stride_w - 1) // stride_w)
                last = min(ow, (width - shift + stride_w - 1) // stride_w)
                for oy in range(r0, r1):
                    iy = oy * stride_h - top + ky * dil_h
                    if iy < 0 or iy >= height:
                        continue
                    base = (oy - r0) * ow
                    for ox in range(first, last):  # contiguous in the output: vectorised
                        acc[c, base + ox] += (np.int64(x[c, iy, ox * stride_w + shift]) - zero) * weight


DEPTHWISE = compiled(_depthwise_rows)
