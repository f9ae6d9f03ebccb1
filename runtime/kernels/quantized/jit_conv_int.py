"""Compiled int8/uint8 CONV_2D and DEPTHWISE_CONV_2D (NHWC, TFLite's arithmetic), with no scratch
but a ring of a few output rows, and correct with their output written over their input.

Each output pixel's int32 accumulators are summed in registers straight from the input (taps in
the padding skipped, as TFLite's reference kernels do) and requantized into a row of the ring;
a row goes to `out` only once no later row reads the input bytes it covers. With the output
starting at the input's first byte, rows are taken forward (a layer whose rows shrink) or
backward (one whose rows grow: a channel-expanding 1x1 conv, as vMCU overlaps them), and the
ring holds the `lag` rows that would otherwise overwrite input still to be read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from runtime.kernels._jit import compiled

_INT32_MIN = -(1 << 31)


def _mbqm(x, m, shift):  # pragma: no cover - compiled
    """TFLite's MultiplyByQuantizedMultiplier on one int64 value (int32 semantics)."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    a = ((np.int64(x) << left) + (np.int64(1) << 31)) & np.int64(0xFFFFFFFF)
    a -= np.int64(1) << 31
    ab = a * m
    t = ab + (np.int64(1) << 30) if ab >= 0 else ab + np.int64(1) - (np.int64(1) << 30)
    high = t >> 31 if t >= 0 else -((-t) >> 31)
    if a == m and a == _INT32_MIN:
        high = np.int64(0x7FFFFFFF)
    high = ((high + (np.int64(1) << 31)) & np.int64(0xFFFFFFFF)) - (np.int64(1) << 31)
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (np.int64(1) if high < 0 else np.int64(0))
    return (high >> right) + (np.int64(1) if (high & mask) > threshold else np.int64(0))


MBQM = compiled(_mbqm, inline=True)


def _flush(ring, out, pixel, slots):  # pragma: no cover - compiled
    src = ring[pixel % slots]
    oy, ox = pixel // out.shape[1], pixel % out.shape[1]
    for c in range(out.shape[2]):
        out[oy, ox, c] = src[c]


def _finish(acc, q, slot, index):  # pragma: no cover - compiled
    for c in range(acc.shape[0]):
        value = MBQM(np.int64(acc[c]) + q[0, c], q[1, c], q[2, c]) + q[3, 0]
        slot[index, c] = min(max(value, q[3, 1]), q[3, 2])


def _conv_rows(x, xz, w, q, geo, out, ring, acc, lag, backward, direct):  # pragma: no cover - compiled
    """`w` is (KH, KW, depth, channels) less its zero point, channels innermost (vectorised): int32
    with int32 `acc` and `xz`, or float32 ones where every sum is exact (`exact_in_float32`)."""
    kh, kw, depth, cout = w.shape
    groups = x.shape[2] // depth
    per_group = cout // groups
    pixels = out.shape[0] * out.shape[1]
    for i in range(pixels):
        p, y0, x0, ky0, ky1, kx0, kx1 = _WINDOW(pixels - 1 - i if backward else i, x.shape, out.shape, geo, kh, kw)
        acc[:] = 0
        for ky in range(ky0, ky1):
            iy = y0 + ky * geo[2]
            for kx in range(kx0, kx1):
                ix = x0 + kx * geo[3]
                for g in range(groups):
                    for d in range(depth):
                        value = x[iy, ix, g * depth + d] - xz
                        for c in range(g * per_group, (g + 1) * per_group):
                            acc[c] += value * w[ky, kx, d, c]
        _EMIT(acc, q, out, ring, p, lag, backward, direct)
    _DRAIN(out, ring, lag, backward, direct)


def _emit(acc, q, out, ring, p, lag, backward, direct):  # pragma: no cover - compiled
    """Pixel p's sums requantized: into `out` at once (`direct`), or into the ring, then the pixel
    `lag` behind it in the order taken goes to `out`."""
    ow, pixels, slots = out.shape[1], out.shape[0] * out.shape[1], lag + 1
    if direct:
        _FINISH(acc, q, out[p // ow], p % ow)
        return
    _FINISH(acc, q, ring, p % slots)
    done = p + lag if backward else p - lag
    if 0 <= done < pixels:
        _FLUSH(ring, out, done, slots)


def _drain(out, ring, lag, backward, direct):  # pragma: no cover - compiled
    pixels = out.shape[0] * out.shape[1]
    for j in range(0 if direct else min(lag, pixels)):
        _FLUSH(ring, out, j if backward else pixels - 1 - j, lag + 1)


def _window(p, x_shape, out_shape, geo, kh, kw):  # pragma: no cover - compiled
    """Output pixel p's window: (p, its top-left input row and column, and the taps [ky0, ky1) and
    [kx0, kx1) that fall inside the image)."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    y0, x0 = (p // out_shape[1]) * stride_h - top, (p % out_shape[1]) * stride_w - left
    ky0, ky1 = TAP_RANGE(y0, dil_h, kh, x_shape[0])
    kx0, kx1 = TAP_RANGE(x0, dil_w, kw, x_shape[1])
    return p, y0, x0, ky0, ky1, kx0, kx1


def _tap_range(start, dilation, taps, size):  # pragma: no cover - compiled
    """The taps k with 0 <= start + k * dilation < size, as [first, last)."""
    first = 0 if start >= 0 else (-start + dilation - 1) // dilation
    last = 0 if start >= size else min(taps, (size - start + dilation - 1) // dilation)
    return first, max(first, last)


def _depthwise_rows(x, xz, w, q, geo, out, ring, acc, lag, backward, direct):  # pragma: no cover - compiled
    """`w` is (KH, KW, channels) less its zero point (int32 or float32, as the conv's)."""
    cin = x.shape[2]
    kh, kw, cout = w.shape
    multiple = cout // cin
    pixels = out.shape[0] * out.shape[1]
    for i in range(pixels):
        p, y0, x0, ky0, ky1, kx0, kx1 = _WINDOW(pixels - 1 - i if backward else i, x.shape, out.shape, geo, kh, kw)
        acc[:] = 0
        for ky in range(ky0, ky1):
            iy = y0 + ky * geo[2]
            for kx in range(kx0, kx1):
                ix = x0 + kx * geo[3]
                if multiple == 1:
                    for c in range(cout):
                        acc[c] += (x[iy, ix, c] - xz) * w[ky, kx, c]
                else:  # each input channel's value once, times its `multiple` filters
                    for ci in range(cin):
                        value = x[iy, ix, ci] - xz
                        for c in range(ci * multiple, (ci + 1) * multiple):
                            acc[c] += value * w[ky, kx, c]
        _EMIT(acc, q, out, ring, p, lag, backward, direct)
    _DRAIN(out, ring, lag, backward, direct)


def exact_in_float32(taps: int, product_bits: int = 15) -> bool:
    """Whether float32 sums of `taps` products of 8-bit values (each under 2**product_bits in
    magnitude: 15 for int8 filters, 16 for uint8 ones less their zero point) stay within 2**24,
    where every integer is exact: twice int32's lanes in the vector units."""
    return taps << product_bits <= 1 << 24


_FLUSH = compiled(_flush)
_EMIT = compiled(_emit)
_DRAIN = compiled(_drain)
TAP_RANGE = compiled(_tap_range, inline=True)
_WINDOW = compiled(_window, inline=True)
_FINISH = compiled(_finish)
CONV = compiled(_conv_rows)
DEPTHWISE = compiled(_depthwise_rows)


@dataclass(frozen=True)
class Order:
    """The order pixels are taken in (row-major, or its reverse) and the pixels held back in the
    ring (`lag`); `direct` (no lag): each pixel written straight into `out`."""

    backward: bool
    lag: int

    @property
    def direct(self) -> bool:
        return self.lag == 0

    @property
    def slots(self) -> int:
        """Pixels in the ring."""
        return 0 if self.direct else self.lag + 1


@functools.lru_cache(maxsize=4096)  # asked by the planner, the workspace and the bind of each node
def row_order(
    x_shape, out_shape, itemsize_in: int, itemsize_out: int, geo: tuple[int, ...], kh: int, kw: int = 1
) -> Order:
    """The order and lag that keep every input byte a later pixel reads intact when the output
    starts at the input's first byte (each window's bytes bounded by its first and last row and
    column): forward if it holds no more pixels back than backward, else backward."""
    stride_h, stride_w, dil_h, dil_w, top, left = geo
    height, width, channels_in = x_shape[1], x_shape[2], x_shape[3]
    oh, ow, channels_out = out_shape[1], out_shape[2], out_shape[3]
    row_in, pixel_in, pixel_out = (
        width * channels_in * itemsize_in,
        channels_in * itemsize_in,
        channels_out * itemsize_out,
    )
    oy, ox = np.divmod(np.arange(oh * ow, dtype=np.int64), ow)
    rows_lo = np.clip(oy * stride_h - top, 0, height - 1)
    cols_lo = np.clip(ox * stride_w - left, 0, width - 1)
    rows_hi = np.clip(oy * stride_h - top + (kh - 1) * dil_h, 0, height - 1)
    cols_hi = np.clip(ox * stride_w - left + (kw - 1) * dil_w, 0, width - 1)
    first = rows_lo * row_in + cols_lo * pixel_in
    end = rows_hi * row_in + (cols_hi + 1) * pixel_in
    p = np.arange(oh * ow, dtype=np.int64)
    if p.size < 2:
        return Order(False, 0)
    # forward: after pixel p, the one `lag` behind ends before the first byte any later pixel reads
    later = np.minimum.accumulate(first[::-1])[::-1]
    ahead = int(max(0, np.max(p[:-1] + 1 - later[1:] // pixel_out)))
    # backward: after pixel p, the one `lag` ahead starts past the last byte any earlier pixel reads
    earlier = np.maximum.accumulate(end)
    behind = int(max(0, np.max(-(-earlier[:-1] // pixel_out) - p[1:])))
    return Order(False, ahead) if ahead <= behind else Order(True, behind)


def channel_table(bias, multiplier, shift, zero: int, lo: int, hi: int, channels: int) -> np.ndarray:
    """(4, channels) int64: bias, multiplier and shift per channel, then (zero point, lo, hi)."""
    table = np.zeros((4, max(channels, 3)), np.int64)
    if bias is not None:
        table[0, :channels] = np.asarray(bias, np.int64).reshape(-1)
    table[1, :channels] = np.broadcast_to(np.asarray(multiplier, np.int64).reshape(-1), (channels,))
    table[2, :channels] = np.broadcast_to(np.asarray(shift, np.int64).reshape(-1), (channels,))
    table[3, :3] = (zero, lo, hi)
    return table


def _dense_rows(x, xz, w, wz, q, out):  # pragma: no cover - compiled
    """FULLY_CONNECTED: (batches, depth) by the (channels, depth) filter into (batches, channels)."""
    channels, depth = w.shape
    for b in range(x.shape[0]):
        for c in range(channels):
            acc = np.int32(0)
            for d in range(depth):
                acc += (np.int32(x[b, d]) - xz) * (np.int32(w[c, d]) - wz)
            value = MBQM(np.int64(acc) + q[0, c], q[1, c], q[2, c]) + q[3, 0]
            out[b, c] = min(max(value, q[3, 1]), q[3, 2])


DENSE = compiled(_dense_rows)
