"""Compiled 2-D MaxPool over float32 planes (`runtime.kernels._jit`).

numpy's route reduces a window axis by axis, a strided ufunc call per tap and axis, each a
pass over the image (ResNet's 3x3 stride-2 pool over 64 x 112 x 112: about 1.1 ms against
onnxruntime's 0.1). Here each output row is made in one go, in cache: the maximum of the
window's input rows into a padded row buffer (contiguous, vectorised), then the maximum of
each window's columns of that buffer. Pads and the ceil_mode overhang read as -inf, the
identity of max, so they never win; NaN propagates as with np.maximum. The loop allocates
nothing (the row buffer is the kernel's workspace); with compiled loops off it is None and
MaxPool keeps numpy's route.
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels._jit import ENABLED, compiled, numba

DTYPE = np.dtype(np.float32)


def row_length(out_w: int, kw: int, sw: int, dw: int) -> int:
    """Elements of the row buffer: twice the input columns the output row's windows span, pads
    included (the span, then its columns' window maxima or its even and odd columns)."""
    return 2 * ((out_w - 1) * sw + (kw - 1) * dw + 1)


def _larger(a, b):  # type: ignore[no-untyped-def]
    """np.maximum of two floats: NaN wins whichever side it is on."""
    return a if a > b or a != a else b


def _max_pool(x, y, row, kh, kw, sh, sw, dh, dw, ph, pw):  # type: ignore[no-untyped-def]
    """y (C, OH, OW) = the maximum over each window of x (C, H, W): window (oy, ox) reads rows
    oy * sh - ph + ky * dh and columns ox * sw - pw + kx * dw; `row` at least `row_length` long."""
    channels, height, width = x.shape
    out_h, out_w = y.shape[1], y.shape[2]
    span = (out_w - 1) * sw + (kw - 1) * dw + 1
    lo = min(pw, span)  # row[lo:hi] holds input columns [lo - pw, hi - pw)
    hi = max(lo, min(span, pw + width))
    lowest = np.float32(-np.inf)
    for i in range(lo):
        row[i] = lowest
    for i in range(hi, span):
        row[i] = lowest
    inner = row[lo:hi]
    dense = row[span : span + (out_w - 1) * sw + 1]
    for c in range(channels):
        for oy in range(out_h):
            first = True
            for ky in range(kh):
                iy = oy * sh - ph + ky * dh
                if iy < 0 or iy >= height:
                    continue
                src = x[c, iy, lo - pw : hi - pw]
                if first:
                    for i in range(inner.size):
                        inner[i] = src[i]
                    first = False
                else:
                    for i in range(inner.size):
                        inner[i] = _larger(inner[i], src[i])
            if first:  # every row of the window is a pad
                for i in range(inner.size):
                    inner[i] = lowest
            dst = y[c, oy]
            if sw == 2 and dw == 1:
                _stride_two(row, span, kw, dst)
                continue
            # each column's window maximum (contiguous, vectorised), then every sw-th of them
            for j in range(dense.size):
                dense[j] = row[j]
            for kx in range(1, kw):
                shifted = row[kx * dw : kx * dw + dense.size]
                for j in range(dense.size):
                    dense[j] = _larger(dense[j], shifted[j])
            for ox in range(out_w):
                dst[ox] = dense[ox * sw]


def _stride_two(row, span, kw, dst):  # type: ignore[no-untyped-def]
    """dst[ox] = the maximum of row[2 ox : 2 ox + kw]: the row split into its even and odd
    columns (two read at a time, which vectorises), then tap kx is a contiguous run of one
    of them from ox + kx // 2 (ResNet's 3x3 stride-2 pool alone: 0.36 -> 0.28 ms)."""
    half = (span + 1) // 2
    even, odd = row[span : span + half], row[span + half : 2 * span]
    for j in range(_u(span // 2)):
        even[j], odd[j] = row[_u(2) * j], row[_u(2) * j + _u(1)]
    if span % 2:
        even[half - 1] = row[span - 1]
    for ox in range(dst.size):
        dst[ox] = even[ox]
    for kx in range(1, kw):
        taps = even[kx // 2 :] if kx % 2 == 0 else odd[kx // 2 :]
        for ox in range(dst.size):
            dst[ox] = _larger(dst[ox], taps[ox])


if ENABLED:
    _larger = compiled(_larger, inline=True)  # type: ignore[assignment]
    _u = compiled(lambda i: numba.uint64(i), inline=True)  # an index known not negative
    _stride_two = compiled(_stride_two, inline=True)  # type: ignore[assignment]
    max_pool = compiled(_max_pool)
else:
    max_pool = None


@functools.cache
def warm() -> None:
    """Compile the loop (or load it from numba's cache) on a tiny call, at prepare."""
    if max_pool is None:
        return
    x = np.zeros((1, 2, 2), DTYPE)
    read_only = x.view()
    read_only.flags.writeable = False
    for image in (x, read_only):
        max_pool(image, np.zeros((1, 1, 1), DTYPE), np.zeros(4, DTYPE), 2, 2, 1, 1, 1, 1, 0, 0)
