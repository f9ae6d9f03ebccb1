"""Compiled depthwise 2-D Conv: every output element written once, bias and activation included.

Per channel, the image is copied once into `sh * sw` zero-padded sub-planes of scratch (in
cache), the padded plane's rows and columns split by their remainder modulo the strides, so
that tap (i, j) of every output pixel reads one sub-plane at a constant offset from the
output's position: output (oy, ox) is position p = oy * wq + ox of a plane `wq` wide, and
tap (i, j) reads sub-plane (i dh mod sh, j dw mod sw) at p + (i dh div sh) wq + (j dw div sw).
No tap needs a bounds check and every tap is one long contiguous multiply-add, vectorised:
the output is summed `TILE` positions at a time into an accumulator (in L1), the bias
first, then each tap; the tile's output rows then go through the fused activation
(`runtime.kernels.jit_activation`) into the output. The spare columns of each row (`wq` is
at least the output's width plus the filter's reach) and of the last tile are computed and
never stored; the sub-planes' pads are zeroed once per call, only the image is written per
channel.

Many channels over a small output (7 wide) run channels-last instead (`channels_last`): the
padded image and the taps copied into (H, W, C) scratch, each tap one vector loop over the
channels of an output pixel, each output row activated in one loop and stored back planar.

Over its own input (`runtime.kernels.planes`: the output starts at the input's first byte,
each plane no larger than the input's), output plane c covers only input planes up to c,
and input plane c has been copied into the sub-planes before any of output plane c is
written: the route is `direct` (no chunk scratch).
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels import jit_activation
from runtime.kernels._jit import compiled
from runtime.kernels.jit_activation import DTYPE, activate, activate_row
from runtime.kernels.window import Geometry

TILE = 512  # output positions summed at a time: 2 KiB of float32, in L1 beside the taps' reads


def _tap(flat, row, j, dw, sw, per, span):  # type: ignore[no-untyped-def]
    """The `span` values tap column j reads for the tile whose kernel row starts at `row`: a
    slice, so that the loops index by their counter alone and vectorise."""
    cj = j * dw
    base = row + (cj % sw) * per + cj // sw
    return flat[base : base + span]


def _depthwise(x, w, b, has_bias, out, subs, acc, sh, sw, dh, dw, top, left, code, a0, a1):  # type: ignore[no-untyped-def]
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    k_h, k_w = w.shape[2], w.shape[3]
    wq = subs.shape[2]
    per = subs.shape[1] * wq
    flat = subs.reshape(-1)
    tile = acc.shape[0]
    total = out_h * wq
    for q in range(flat.size):
        flat[q] = np.float32(0.0)
    for n in range(batch):
        for c in range(channels):
            for y in range(height):
                yy = y + top
                src = x[n, c, y]
                row = (yy % sh) * sw * per + (yy // sh) * wq
                if sw == 1:
                    dst = flat[row + left : row + left + width]
                    for q in range(width):
                        dst[q] = src[q]
                    continue
                if sw == 2:
                    # Columns 2k and 2k + 1 go to the two parities: one pass, both loads in step.
                    even = flat[row + (left % 2) * per + left // 2 :]
                    odd = flat[row + (1 - left % 2) * per + (left + 1) // 2 :]
                    for k in range(width // 2):
                        even[k] = src[2 * k]
                        odd[k] = src[2 * k + 1]
                    if width % 2:
                        even[width // 2] = src[width - 1]
                    continue
                # Input column q goes to sub-plane column (q + left) // sw of parity (q + left) % sw.
                for parity in range(sw):
                    first = (parity - left) % sw  # the first input column of this parity
                    if first >= width:
                        continue
                    count = (width - first + sw - 1) // sw
                    dst = flat[row + parity * per + (first + left) // sw :]
                    picked = src[first:]
                    for q in range(count):
                        dst[q] = picked[q * sw]
            bias = b[c] if has_bias else np.float32(0.0)
            taps = w[c, 0]
            plane = out[n, c]
            for start in range(0, total, tile):
                # The last tile only as far as the output reaches, rounded up to whole vectors.
                span = min(tile, (total - start + 15) // 16 * 16)
                if k_h == 3 and k_w == 3:
                    # All nine taps in one pass (upper, middle, lower kernel rows): each sum is stored once.
                    r0 = start
                    r1 = (dh % sh) * sw * per + (dh // sh) * wq + start
                    r2 = ((2 * dh) % sh) * sw * per + ((2 * dh) // sh) * wq + start
                    u0, u1, u2 = (
                        _tap(flat, r0, 0, dw, sw, per, span),
                        _tap(flat, r0, 1, dw, sw, per, span),
                        _tap(flat, r0, 2, dw, sw, per, span),
                    )
                    m0, m1, m2 = (
                        _tap(flat, r1, 0, dw, sw, per, span),
                        _tap(flat, r1, 1, dw, sw, per, span),
                        _tap(flat, r1, 2, dw, sw, per, span),
                    )
                    l0, l1, l2 = (
                        _tap(flat, r2, 0, dw, sw, per, span),
                        _tap(flat, r2, 1, dw, sw, per, span),
                        _tap(flat, r2, 2, dw, sw, per, span),
                    )
                    w00, w01, w02 = taps[0, 0], taps[0, 1], taps[0, 2]
                    w10, w11, w12 = taps[1, 0], taps[1, 1], taps[1, 2]
                    w20, w21, w22 = taps[2, 0], taps[2, 1], taps[2, 2]
                    for q in range(span):
                        acc[q] = (
                            bias
                            + w00 * u0[q] + w01 * u1[q] + w02 * u2[q]
                            + w10 * m0[q] + w11 * m1[q] + w12 * m2[q]
                            + w20 * l0[q] + w21 * l1[q] + w22 * l2[q]
                        )  # fmt: skip
                    k_rows = 0
                else:
                    for q in range(span):
                        acc[q] = bias
                    k_rows = k_h
                for i in range(k_rows):
                    ri = i * dh
                    row = (ri % sh) * sw * per + (ri // sh) * wq + start
                    if k_w == 3:
                        # A kernel row's taps in one pass: the accumulator is read and written once.
                        s0 = _tap(flat, row, 0, dw, sw, per, span)
                        s1 = _tap(flat, row, 1, dw, sw, per, span)
                        s2 = _tap(flat, row, 2, dw, sw, per, span)
                        t0, t1, t2 = taps[i, 0], taps[i, 1], taps[i, 2]
                        for q in range(span):
                            acc[q] += t0 * s0[q] + t1 * s1[q] + t2 * s2[q]
                    elif k_w == 5:
                        s0 = _tap(flat, row, 0, dw, sw, per, span)
                        s1 = _tap(flat, row, 1, dw, sw, per, span)
                        s2 = _tap(flat, row, 2, dw, sw, per, span)
                        s3 = _tap(flat, row, 3, dw, sw, per, span)
                        s4 = _tap(flat, row, 4, dw, sw, per, span)
                        t0, t1, t2, t3, t4 = taps[i, 0], taps[i, 1], taps[i, 2], taps[i, 3], taps[i, 4]
                        for q in range(span):
                            acc[q] += t0 * s0[q] + t1 * s1[q] + t2 * s2[q] + t3 * s3[q] + t4 * s4[q]
                    else:
                        for j in range(k_w):
                            src = _tap(flat, row, j, dw, sw, per, span)
                            tap = taps[i, j]
                            for q in range(span):
                                acc[q] += tap * src[q]
                if out_w < 32:
                    # Short rows: the activation over the whole tile in one vector loop (the
                    # spare columns' values are never stored), then the rows copied out.
                    activate(acc[:span], code, a0, a1)
                for oy in range(start // wq, min(out_h, (start + span + wq - 1) // wq)):
                    first = max(oy * wq, start)
                    end = min(oy * wq + out_w, start + span)
                    if end <= first:
                        continue
                    if out_w < 32:
                        src, dst = acc[first - start : end - start], plane[oy, first - oy * wq :]
                        for q in range(end - first):
                            dst[q] = src[q]
                    else:
                        activate_row(acc[first - start :], plane[oy, first - oy * wq :], end - first, code, a0, a1)


# Inlined into the loops (a call per tap and tile would cost as much as a short tile's sums).
_tap = jit_activation.inline(_tap) or _tap
depthwise = compiled(_depthwise) if activate_row is not None else None


def uses_compiled(geo: Geometry, dtype) -> bool:
    """Whether the compiled loop can run a depthwise Conv of this geometry and dtype."""
    return depthwise is not None and len(geo.kernel) == 2 and np.dtype(dtype) == DTYPE


def _sub_planes(x_shape, geo: Geometry) -> tuple[int, int, int]:
    """(sub-planes, rows, columns) of the sub-planes: each holds its share of the padded image
    and the rows and columns the taps and the last tile read past the output's end."""
    (sh, sw), (dh, dw), (top, left) = geo.strides, geo.dilations, geo.begin
    reach_rows, reach_cols = (geo.kernel[0] - 1) * dh // sh, (geo.kernel[1] - 1) * dw // sw
    wq = max(geo.out[1] + reach_cols, (left + x_shape[3] - 1) // sw + 1)
    rows = max(geo.out[0] + reach_rows, (top + x_shape[2] - 1) // sh + 1) + -(-TILE // wq) + 1
    return sh * sw, rows, wq


def compiled_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_depthwise_compiled`: the sub-planes and a tile's sums."""
    dtype = np.dtype(dtype)
    return [(_sub_planes(x_shape, geo), dtype), ((TILE,), dtype)]


def conv_depthwise_compiled(x, w, b, out, geo: Geometry, subs, acc, act: tuple[int, float, float]) -> None:
    """`out` = act(depthwise Conv(x, w) + b) for float32 NCHW `x`; `subs` and `acc` are the
    blocks of `compiled_layout`; `act` is a `jit_activation.spec`."""
    assert depthwise is not None
    code, p0, p1 = act
    x, w, bias = _read_only(x), _read_only(w), _read_only(w.reshape(-1) if b is None else b)
    depthwise(
        x, w, bias, b is not None, out, subs, acc,
        geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.begin[0], geo.begin[1],
        code, p0, p1,
    )  # fmt: skip


def _read_only(a: np.ndarray) -> np.ndarray:
    """`a`, or a read-only view of it: the loop is compiled for read-only inputs (a session's
    tensors are), so that one compilation serves every call."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


@functools.cache
def warm() -> None:
    """Compile the loop (or load it from numba's cache) now, on a tiny call: a session calls
    this at prepare, so that no compilation falls in a run (its allocations would count
    beside the arena)."""
    if depthwise is None:
        return
    jit_activation.warm()
    x, w = np.zeros((1, 1, 3, 3), DTYPE), np.zeros((1, 1, 1, 1), DTYPE)
    geo = Geometry((1, 1), (1, 1), (1, 1), (0, 0), (0, 0), (3, 3))
    (subs_shape, _), (acc_shape, _) = compiled_layout(x.shape, geo, DTYPE)
    out = np.empty((1, 1, 3, 3), DTYPE)
    conv_depthwise_compiled(
        x, w, None, out, geo, np.empty(subs_shape, DTYPE), np.empty(acc_shape, DTYPE), (0, 0.0, 0.0)
    )
    image, taps, rows = (np.empty(shape, DTYPE) for shape, _ in channels_last_layout(x.shape, geo, DTYPE))
    conv_channels_last(x, w, None, out, geo, image, taps, rows, (0, 0.0, 0.0))


def _channels_last(x, w, b, has_bias, out, image, taps, rows, sh, sw, dh, dw, top, left, code, a0, a1):  # type: ignore[no-untyped-def]
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    k_h, k_w = w.shape[2], w.shape[3]
    for c in range(channels):
        for i in range(k_h):
            for j in range(k_w):
                taps[i, j, c] = w[c, 0, i, j]
    flat = image.reshape(-1)
    for q in range(flat.size):
        flat[q] = np.float32(0.0)
    for n in range(batch):
        # The whole image is read before any output is written (over its own input: `direct`).
        for c in range(channels):
            plane = x[n, c]
            for y in range(height):
                for xx in range(width):
                    image[top + y, left + xx, c] = plane[y, xx]
        for oy in range(out_h):
            for ox in range(out_w):
                acc = rows[ox]
                if has_bias:
                    for c in range(channels):
                        acc[c] = b[c]
                else:
                    for c in range(channels):
                        acc[c] = np.float32(0.0)
                for i in range(k_h):
                    for j in range(k_w):
                        src, tap = image[oy * sh + i * dh, ox * sw + j * dw], taps[i, j]
                        for c in range(channels):
                            acc[c] += tap[c] * src[c]
            activate(rows.reshape(-1), code, a0, a1)
            for c in range(channels):
                target = out[n, c, oy]
                for ox in range(out_w):
                    target[ox] = rows[ox, c]


channels_last = compiled(_channels_last) if activate is not None else None


def channels_last_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_channels_last`: the padded image and the taps channels-last,
    and one output row's sums (every pixel's channels contiguous)."""
    dtype, channels = np.dtype(dtype), x_shape[1]
    (top, left), (bottom, right) = geo.begin, geo.end
    rows = max(top + x_shape[2] + bottom, (geo.out[0] - 1) * geo.strides[0] + geo.extent[0])
    cols = max(left + x_shape[3] + right, (geo.out[1] - 1) * geo.strides[1] + geo.extent[1])
    return [((rows, cols, channels), dtype), ((*geo.kernel, channels), dtype), ((geo.out[1], channels), dtype)]


def conv_channels_last(x, w, b, out, geo: Geometry, image, taps, rows, act: tuple[int, float, float]) -> None:
    """`out` = act(depthwise Conv(x, w) + b) channels-last: for many channels over small maps,
    each tap one vector loop over the channels; the blocks are `channels_last_layout`'s."""
    assert channels_last is not None
    code, p0, p1 = act
    x, w, bias = _read_only(x), _read_only(w), _read_only(w.reshape(-1) if b is None else b)
    channels_last(
        x, w, bias, b is not None, out, image, taps, rows,
        geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.begin[0], geo.begin[1],
        code, p0, p1,
    )  # fmt: skip
