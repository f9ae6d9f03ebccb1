"""ConvTranspose: one BLAS matmul per band of input rows, then col2im.

It multiplies first (into a workspace column buffer, a band of input rows at a time) and
scatter-adds the columns into the output, one strided add per kernel offset.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import kernel, window
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers, units_within
from runtime.kernels.window import Geometry


def _transpose_pads(x_spatial, y_spatial, geo_k, strides, dilations, output_padding, auto_pad, pads, output_shape):
    """Pads before each axis of a ConvTranspose output, following the spec: explicit pads win
    unless output_shape or SAME auto_pad ask for them to be derived from the output size."""
    rank = len(x_spatial)
    if pads and output_shape is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(pads[:rank])
    if output_shape is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return (0,) * rank
    begin = []
    for i in range(rank):
        total = strides[i] * (x_spatial[i] - 1) + output_padding[i] + (geo_k[i] - 1) * dilations[i] + 1 - y_spatial[i]
        begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    return tuple(begin)


def _transpose_band_rows(x_shape, w_shape, group: int, dtype) -> int:
    """Input rows per ConvTranspose column band (the same budget as Conv's im2col bands)."""
    per_row = w_shape[1] * group * int(np.prod(w_shape[2:]) * np.prod(x_shape[3:], dtype=np.int64))
    return units_within(window.IM2COL_BLOCK_BYTES, per_row * np.dtype(dtype).itemsize, x_shape[2])


def conv_transpose_workspace(inputs, outputs, *, group=1, **_: object) -> int:
    x, w = inputs[0], inputs[1]
    rows = _transpose_band_rows(x.shape, w.shape, group, x.dtype)
    band = (w.shape[1] * group * math.prod(w.shape[2:]), rows * math.prod(x.shape[3:]))
    return scratch_bytes((band, x.dtype))


def _scatter_taps(target, cols, rows: tuple[int, int], geo: Geometry) -> None:
    """Add the columns of input rows [rows) (``cols``: filters, *kernel, band rows, *rest) into
    `target`: tap k of input position i lands on output position i * stride + k * dilation - pad."""
    rank = len(geo.kernel)
    avail = [rows] + [(0, cols.shape[1 + rank + i]) for i in range(1, rank)]
    for k in np.ndindex(*geo.kernel):
        src, dst = [], []
        for i in range(rank):
            shift = k[i] * geo.dilations[i] - geo.begin[i]  # output position of input 0 for this tap
            first = -(shift // geo.strides[i]) if shift < 0 else 0  # first input landing at >= 0
            lo = max(avail[i][0], first)
            hi = min(avail[i][1] - 1, (geo.out[i] - 1 - shift) // geo.strides[i])
            if hi < lo:
                break
            src.append(slice(lo - avail[i][0], hi - avail[i][0] + 1))
            dst.append(slice(lo * geo.strides[i] + shift, hi * geo.strides[i] + shift + 1, geo.strides[i]))
        else:
            target[(slice(None), *dst)] += cols[(slice(None), *k, *src)]


@kernel("ConvTranspose", workspace=conv_transpose_workspace)
@small_ufunc_buffers()
def conv_transpose(
    x, w, b=None, *, out, ws, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
    output_padding=None, output_shape=None, pads=None, strides=None,
):  # fmt: skip
    batch, channels = x.shape[:2]
    rank = x.ndim - 2
    ksize = tuple(w.shape[2:])
    strides = tuple(strides) if strides else (1,) * rank
    dilations = tuple(dilations) if dilations else (1,) * rank
    output_padding = tuple(output_padding) if output_padding else (0,) * rank
    begin = _transpose_pads(
        x.shape[2:], out.shape[2:], ksize, strides, dilations, output_padding, auto_pad, pads, output_shape
    )
    geo = Geometry(ksize, strides, dilations, begin, (0,) * rank, tuple(out.shape[2:]))
    filters = w.shape[1] * group
    rows = _transpose_band_rows(x.shape, w.shape, group, x.dtype)
    rest = math.prod(x.shape[3:])
    col = Scratch(ws, "ConvTranspose").take((filters * math.prod(ksize) * rows * rest,), x.dtype)
    # (group, C/group, M/group*K) -> its transpose per group multiplies the image's channels.
    per_group = w.reshape(group, channels // group, -1).transpose(0, 2, 1)
    for n in range(batch):
        target = out[n]
        target[...] = 0 if b is None else b.reshape((filters,) + (1,) * rank)
        for r in range(0, x.shape[2], rows):
            m = min(rows, x.shape[2] - r)
            band = col[: col.size // rows * m]
            inputs = x[n, :, r : r + m].reshape(group, channels // group, m * rest)
            np.matmul(per_group, inputs, out=band.reshape(group, -1, m * rest))
            _scatter_taps(target, band.reshape(filters, *ksize, m, *x.shape[3:]), (r, r + m), geo)
