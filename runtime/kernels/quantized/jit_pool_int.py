"""Compiled 8-bit AVERAGE_POOL_2D and MAX_POOL_2D (NHWC, TFLite's rounding): each output pixel's
window summed or maxed per channel into one pixel of scratch, then written straight into `out`, in
an order where it only overwrites input bytes no later window reads (`row_order`'s `direct`), so the
pool may run with its output over its dying input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.kernels._jit import compiled
from runtime.kernels.planes import Planes
from runtime.kernels.quantized.common import same_padding
from runtime.kernels.quantized.jit_conv_int import TAP_RANGE, row_order


def _pool_pixels(x, out, acc, geo, window, average, lo, hi, backward):  # pragma: no cover - compiled
    stride_h, stride_w, top, left = geo
    fh, fw = window
    height, width, channels = x.shape
    oh, ow = out.shape[0], out.shape[1]
    pixels = oh * ow
    for i in range(pixels):
        p = pixels - 1 - i if backward else i
        oy, ox = p // ow, p % ow
        y0, x0 = oy * stride_h - top, ox * stride_w - left
        ky0, ky1 = TAP_RANGE(y0, 1, fh, height)
        kx0, kx1 = TAP_RANGE(x0, 1, fw, width)
        for c in range(channels):
            acc[c] = 0 if average else -(1 << 30)
        for iy in range(y0 + ky0, y0 + ky1):
            for ix in range(x0 + kx0, x0 + kx1):
                for c in range(channels):
                    value = np.int32(x[iy, ix, c])
                    if average:
                        acc[c] += value
                    elif value > acc[c]:
                        acc[c] = value
        count = (ky1 - ky0) * (kx1 - kx0)
        half = count // 2
        for c in range(channels):
            v = acc[c]
            if average and count > 0:  # to nearest, ties away from zero, as TFLite's integer average
                v = (v + half) // count if v > 0 else -((half - v) // count)
            out[oy, ox, c] = min(max(v, lo), hi)


POOL = compiled(_pool_pixels)


def _geometry(x: Any, out: Any, attrs: dict[str, Any]) -> tuple[int, int, int, int]:
    stride_h, stride_w = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    top, _ = same_padding(
        x.shape[1], int(attrs.get("filter_height", 1)), stride_h, 1, out.shape[1], attrs.get("pad_top")
    )
    left, _ = same_padding(x.shape[2], int(attrs.get("filter_width", 1)), stride_w, 1, out.shape[2])
    return stride_h, stride_w, top, left


def pool_route(x: Any, out: Any, attrs: dict[str, Any]):
    """(geometry, backward) of the compiled route for an 8-bit pool, or None off it."""
    if POOL is None or x is None or out is None or len(x.shape) != 4 or x.dtype.itemsize != 1:
        return None
    if x.dtype.kind not in "iu" or x.dtype != out.dtype:
        return None
    stride_h, stride_w, top, left = _geometry(x, out, attrs)
    fh, fw = int(attrs.get("filter_height", 1)), int(attrs.get("filter_width", 1))
    order = row_order(tuple(x.shape), tuple(out.shape), 1, 1, (stride_h, stride_w, 1, 1, top, left), fh, fw)
    return (stride_h, stride_w, top, left), order


def _over(attrs: dict[str, Any], inputs: Sequence[Any], out: Any) -> bool:
    route = pool_route(inputs[0] if inputs else None, out, attrs)
    return route is not None and inputs[0].shape[0] == 1 and route[1].direct


# `depthwise=True` keeps the NCHW plane-wise reading off for these NHWC ops: only `over` applies.
POOL_PLANES = Planes(depthwise=True, over=_over)
