"""Compiled depthwise 2-D Conv: every output element written once, bias and activation included.

Per channel, the image is copied once into `sh * sw` zero-padded sub-planes of scratch (in
cache), the padded plane's rows and columns split by their remainder modulo the strides, so
that tap (i, j) of every output pixel reads one sub-plane at a constant offset from the
output's position: output (oy, ox) is position p = oy * wq + ox of a plane `wq` wide, and
tap (i, j) reads sub-plane (i dh mod sh, j dw mod sw) at p + (i dh div sh) wq + (j dw div sw).
No tap needs a bounds check and every tap is one long contiguous multiply-add, vectorised:
the output is summed a tile of whole output rows at a time (about `TILE` positions, at least
one row) into an accumulator (in L1), the bias first, then each tap (a 3x3 filter's nine in one
pass, a 5x5 filter's five per kernel row); the tile's rows then go through the fused
activation (`runtime.kernels.jit_activation`) into the output. The spare columns of each row
(`wq` is at least the output's width plus the filter's reach) are computed and never stored;
the sub-planes' pads are zeroed once per call, only the image is written per channel, its rows
placed by counters (a division per row cost as much as copying a 14-wide row).

Many channels over a small output (7 wide) run channels-last instead (`channels_last`): the
padded image copied into (H, W, C) scratch four pixels by `CB` channels at a time (the planes'
lines stay in L1), the taps and bias into rows of C; two output pixels per pass, each a vector
loop over the channels that loads each tap once for both sums (3x3 in one pass, 5x5 one per
kernel row); the whole image's sums activated in one loop and transposed back the same way.

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

CB = 64  # channels transposed at a time by the channels-last loop: their planes' lines stay in L1
TILE = 512  # output positions summed at a time: 2 KiB of float32, in L1 beside the taps' reads


def _tap(flat, row, j, dw, sw, per, span):  # type: ignore[no-untyped-def]
    """The `span` values tap column j reads for the tile whose kernel row starts at `row`: a
    slice, so that the loops index by their counter alone and vectorise."""
    cj = j * dw
    base = row + (cj % sw) * per + cj // sw
    return flat[base : base + span]


def _row(i, start, g):  # type: ignore[no-untyped-def]
    """Where kernel row i of the tile starting at `start` begins in the flat sub-planes, unsigned
    (`g` is (sh, sw, dh, dw, per, wq)): a loop indexing by an unsigned counter plus such offsets
    has no wraparound check to make, and vectorises (signed computed indexes: 10x slower)."""
    sh, sw, dh, _, per, wq = g
    ri = i * dh
    return np.uint64((ri % sh) * sw * per + (ri // sh) * wq + start)


def _col(j, g):  # type: ignore[no-untyped-def]
    """The offset of kernel column j from its kernel row's start (`_row`), unsigned."""
    _, sw, _, dw, per, _ = g
    cj = j * dw
    return np.uint64((cj % sw) * per + cj // sw)


def _sum3x3(flat, acc, span, start, g, taps, bias):  # type: ignore[no-untyped-def]
    """acc[:span] = bias + the nine taps over the tile at `start`, one pass: each sum stored once."""
    r0, r1, r2 = _row(0, start, g), _row(1, start, g), _row(2, start, g)
    c0, c1, c2 = _col(0, g), _col(1, g), _col(2, g)
    w00, w01, w02 = taps[0, 0], taps[0, 1], taps[0, 2]
    w10, w11, w12 = taps[1, 0], taps[1, 1], taps[1, 2]
    w20, w21, w22 = taps[2, 0], taps[2, 1], taps[2, 2]
    for q in range(span):
        u = np.uint64(q)
        a, m, d = u + r0, u + r1, u + r2
        acc[u] = (
            bias
            + w00 * flat[a + c0] + w01 * flat[a + c1] + w02 * flat[a + c2]
            + w10 * flat[m + c0] + w11 * flat[m + c1] + w12 * flat[m + c2]
            + w20 * flat[d + c0] + w21 * flat[d + c1] + w22 * flat[d + c2]
        )  # fmt: skip


def _sum5x5(flat, acc, span, r, taps, bias):  # type: ignore[no-untyped-def]
    """`_sum3x3` for a 5x5 filter at stride 1, all 25 taps in one pass with their weights in
    registers: kernel row i reads columns r[i] to r[i] + 4. Constant displacements keep the
    compiler from spilling a pointer per tap (runtime column offsets made the pass twice as
    slow), and no pass reads the sums back."""
    r0, r1, r2, r3, r4 = r
    w00, w01, w02, w03, w04 = taps[0, 0], taps[0, 1], taps[0, 2], taps[0, 3], taps[0, 4]
    w10, w11, w12, w13, w14 = taps[1, 0], taps[1, 1], taps[1, 2], taps[1, 3], taps[1, 4]
    w20, w21, w22, w23, w24 = taps[2, 0], taps[2, 1], taps[2, 2], taps[2, 3], taps[2, 4]
    w30, w31, w32, w33, w34 = taps[3, 0], taps[3, 1], taps[3, 2], taps[3, 3], taps[3, 4]
    w40, w41, w42, w43, w44 = taps[4, 0], taps[4, 1], taps[4, 2], taps[4, 3], taps[4, 4]
    one, two, three, four = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
    for q in range(0, span, 16):  # whole vectors (span is a multiple of 16): no scalar remainder
        for k in range(16):
            u = np.uint64(q + k)
            a, m, d, e, f = u + r0, u + r1, u + r2, u + r3, u + r4
            acc[u] = (
                bias
                + w00 * flat[a] + w01 * flat[a + one] + w02 * flat[a + two] + w03 * flat[a + three] + w04 * flat[a + four]
                + w10 * flat[m] + w11 * flat[m + one] + w12 * flat[m + two] + w13 * flat[m + three] + w14 * flat[m + four]
                + w20 * flat[d] + w21 * flat[d + one] + w22 * flat[d + two] + w23 * flat[d + three] + w24 * flat[d + four]
                + w30 * flat[e] + w31 * flat[e + one] + w32 * flat[e + two] + w33 * flat[e + three] + w34 * flat[e + four]
                + w40 * flat[f] + w41 * flat[f + one] + w42 * flat[f + two] + w43 * flat[f + three] + w44 * flat[f + four]
            )  # fmt: skip


def _sum5x5_s2(flat, acc, span, r, o, taps, bias):  # type: ignore[no-untyped-def]
    """`_sum5x5` at column stride 2: kernel row i reads columns r[i], o[i], r[i] + 1, o[i] + 1,
    r[i] + 2, o[i] being the odd columns' sub-plane."""
    r0, r1, r2, r3, r4 = r
    o0, o1, o2, o3, o4 = o
    w00, w01, w02, w03, w04 = taps[0, 0], taps[0, 1], taps[0, 2], taps[0, 3], taps[0, 4]
    w10, w11, w12, w13, w14 = taps[1, 0], taps[1, 1], taps[1, 2], taps[1, 3], taps[1, 4]
    w20, w21, w22, w23, w24 = taps[2, 0], taps[2, 1], taps[2, 2], taps[2, 3], taps[2, 4]
    w30, w31, w32, w33, w34 = taps[3, 0], taps[3, 1], taps[3, 2], taps[3, 3], taps[3, 4]
    w40, w41, w42, w43, w44 = taps[4, 0], taps[4, 1], taps[4, 2], taps[4, 3], taps[4, 4]
    one, two = np.uint64(1), np.uint64(2)
    for q in range(0, span, 16):
        for k in range(16):
            u = np.uint64(q + k)
            a, m, d, e, f = u + r0, u + r1, u + r2, u + r3, u + r4
            a_, m_, d_, e_, f_ = u + o0, u + o1, u + o2, u + o3, u + o4
            acc[u] = (
                bias
                + w00 * flat[a] + w01 * flat[a_] + w02 * flat[a + one] + w03 * flat[a_ + one] + w04 * flat[a + two]
                + w10 * flat[m] + w11 * flat[m_] + w12 * flat[m + one] + w13 * flat[m_ + one] + w14 * flat[m + two]
                + w20 * flat[d] + w21 * flat[d_] + w22 * flat[d + one] + w23 * flat[d_ + one] + w24 * flat[d + two]
                + w30 * flat[e] + w31 * flat[e_] + w32 * flat[e + one] + w33 * flat[e_ + one] + w34 * flat[e + two]
                + w40 * flat[f] + w41 * flat[f_] + w42 * flat[f + one] + w43 * flat[f_ + one] + w44 * flat[f + two]
            )  # fmt: skip


def _depthwise(x, w, b, has_bias, out, subs, acc, sh, sw, dh, dw, top, left, code, a0, a1):  # type: ignore[no-untyped-def]
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    k_h, k_w = w.shape[2], w.shape[3]
    wq = subs.shape[2]
    per = subs.shape[1] * wq
    flat = subs.reshape(-1)
    tile_rows = max(1, acc.shape[0] // wq)  # output rows summed at a time
    for q in range(flat.size):
        flat[q] = np.float32(0.0)
    for n in range(batch):
        for c in range(channels):
            # Input row y goes to sub-plane row (y + top) // sh of parity (y + top) % sh: counted,
            # not divided (a division per row cost as much as a 14-wide row's copy).
            ry, qy = top % sh, top // sh
            for y in range(height):
                src = x[n, c, y]
                row = ry * sw * per + qy * wq
                ry += 1
                if ry == sh:
                    ry, qy = 0, qy + 1
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
            plane = out[n, c].reshape(-1)
            for oy0 in range(0, out_h, tile_rows):
                # Whole output rows at a time; the last row's spare columns only as far as whole vectors.
                start = oy0 * wq
                oy1 = min(out_h, oy0 + tile_rows)
                span = min(acc.shape[0], (oy1 * wq - wq + out_w - start + 15) // 16 * 16)
                g = (sh, sw, dh, dw, per, wq)
                if k_h == 3 and k_w == 3:
                    _sum3x3(flat, acc, span, start, g, taps, bias)
                elif k_h == 5 and k_w == 5 and dw == 1 and sw <= 2:
                    r = (_row(0, start, g), _row(1, start, g), _row(2, start, g), _row(3, start, g), _row(4, start, g))
                    if sw == 1:
                        _sum5x5(flat, acc, span, r, taps, bias)
                    else:
                        o = _col(1, g)
                        _sum5x5_s2(flat, acc, span, r, (r[0] + o, r[1] + o, r[2] + o, r[3] + o, r[4] + o), taps, bias)
                else:
                    for q in range(span):
                        acc[q] = bias
                    for i in range(k_h):
                        ri = i * dh
                        row = (ri % sh) * sw * per + (ri // sh) * wq + start
                        for j in range(k_w):
                            src = _tap(flat, row, j, dw, sw, per, span)
                            tap = taps[i, j]
                            for q in range(span):
                                acc[q] += tap * src[q]
                # The activation over the whole tile in one vector loop (the spare columns'
                # values are never stored), then the rows copied out: a compiled call per
                # row cost about 20 ns, more than copying a 56-wide row.
                activate(acc[:span], code, a0, a1)
                for oy in range(oy0, oy1):
                    src, dst = np.uint64((oy - oy0) * wq), np.uint64(oy * out_w)
                    for q in range(out_w):
                        u = np.uint64(q)
                        plane[dst + u] = acc[src + u]


# Inlined into the loops (a call per tap and tile would cost as much as a short tile's sums).
_tap = jit_activation.inline(_tap) or _tap
_row = jit_activation.inline(_row) or _row
_col = jit_activation.inline(_col) or _col
_sum3x3 = jit_activation.inline(_sum3x3) or _sum3x3
# Called, not inlined: in a function of their own the 25 weights stay in registers (inlined,
# the loop around them spilled most of them, 1.5x the time).
_sum5x5 = compiled(_sum5x5) or _sum5x5
_sum5x5_s2 = compiled(_sum5x5_s2) or _sum5x5_s2
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
    if sw == 1:
        # A row's right pad is the next row's left pad: the taps past a row's end read the
        # zeros before the next row's image (at most `right` columns wide), fewer spare sums.
        wq = max(geo.out[1], left + x_shape[3], x_shape[3] + geo.end[1])
    rows = max(geo.out[0] + reach_rows, (top + x_shape[2] - 1) // sh + 1) + -(-TILE // wq) + 1
    return sh * sw, rows, wq


def compiled_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_depthwise_compiled`: the sub-planes and a tile's sums."""
    dtype = np.dtype(dtype)
    subs = _sub_planes(x_shape, geo)
    return [(subs, dtype), ((max(TILE, -(-subs[2] // 16) * 16),), dtype)]  # at least one row


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


def _pixel(image, taps, bias, acc, y0, x0, dh, dw, k_h, k_w):  # type: ignore[no-untyped-def]
    """acc = bias + the taps over the window at (y0, x0) of the channels-last image, every
    channel: vector loops over the channels, 3x3 in one pass, 5x5 one pass per kernel row."""
    channels = acc.shape[0]
    if k_h == 3 and k_w == 3:
        u, m, d = image[y0], image[y0 + dh], image[y0 + 2 * dh]
        c0, c1, c2 = x0, x0 + dw, x0 + 2 * dw
        u0, u1, u2, m0, m1, m2, l0, l1, l2 = u[c0], u[c1], u[c2], m[c0], m[c1], m[c2], d[c0], d[c1], d[c2]
        w00, w01, w02, w10, w11, w12 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5]
        w20, w21, w22 = taps[6], taps[7], taps[8]
        for c in range(channels):
            acc[c] = (
                bias[c]
                + w00[c] * u0[c] + w01[c] * u1[c] + w02[c] * u2[c]
                + w10[c] * m0[c] + w11[c] * m1[c] + w12[c] * m2[c]
                + w20[c] * l0[c] + w21[c] * l1[c] + w22[c] * l2[c]
            )  # fmt: skip
        return
    for c in range(channels):
        acc[c] = bias[c]
    for i in range(k_h):
        r, t = image[y0 + i * dh], taps[i * k_w : (i + 1) * k_w]
        if k_w == 5:
            s0, s1, s2, s3, s4 = r[x0], r[x0 + dw], r[x0 + 2 * dw], r[x0 + 3 * dw], r[x0 + 4 * dw]
            t0, t1, t2, t3, t4 = t[0], t[1], t[2], t[3], t[4]
            for c in range(channels):
                acc[c] += t0[c] * s0[c] + t1[c] * s1[c] + t2[c] * s2[c] + t3[c] * s3[c] + t4[c] * s4[c]
        else:
            for j in range(k_w):
                src, tap = r[x0 + j * dw], t[j]
                for c in range(channels):
                    acc[c] += tap[c] * src[c]


def _pair(image, taps, bias, acc, bcc, y0, x0, sw, dh, dw, k_h, k_w):  # type: ignore[no-untyped-def]
    """`_pixel` for the pixels at (y0, x0) into acc and (y0, x0 + sw) into bcc, in the same
    passes: each tap loaded once for both."""
    channels = acc.shape[0]
    if k_h == 3 and k_w == 3:
        u, m, d = image[y0], image[y0 + dh], image[y0 + 2 * dh]
        c0, c1, c2 = x0, x0 + dw, x0 + 2 * dw
        u0, u1, u2, m0, m1, m2, l0, l1, l2 = u[c0], u[c1], u[c2], m[c0], m[c1], m[c2], d[c0], d[c1], d[c2]
        e0, e1, e2 = c0 + sw, c1 + sw, c2 + sw
        v0, v1, v2, n0, n1, n2, k0, k1, k2 = u[e0], u[e1], u[e2], m[e0], m[e1], m[e2], d[e0], d[e1], d[e2]
        w00, w01, w02, w10, w11, w12 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5]
        w20, w21, w22 = taps[6], taps[7], taps[8]
        for c in range(channels):
            a00, a01, a02, a10, a11, a12 = w00[c], w01[c], w02[c], w10[c], w11[c], w12[c]
            a20, a21, a22, z = w20[c], w21[c], w22[c], bias[c]
            acc[c] = (
                z + a00 * u0[c] + a01 * u1[c] + a02 * u2[c] + a10 * m0[c] + a11 * m1[c] + a12 * m2[c]
                + a20 * l0[c] + a21 * l1[c] + a22 * l2[c]
            )  # fmt: skip
            bcc[c] = (
                z + a00 * v0[c] + a01 * v1[c] + a02 * v2[c] + a10 * n0[c] + a11 * n1[c] + a12 * n2[c]
                + a20 * k0[c] + a21 * k1[c] + a22 * k2[c]
            )  # fmt: skip
        return
    for c in range(channels):
        acc[c] = bias[c]
        bcc[c] = bias[c]
    for i in range(k_h):
        r, t = image[y0 + i * dh], taps[i * k_w : (i + 1) * k_w]
        if k_w == 5:
            s0, s1, s2, s3, s4 = r[x0], r[x0 + dw], r[x0 + 2 * dw], r[x0 + 3 * dw], r[x0 + 4 * dw]
            x1 = x0 + sw
            q0, q1, q2, q3, q4 = r[x1], r[x1 + dw], r[x1 + 2 * dw], r[x1 + 3 * dw], r[x1 + 4 * dw]
            t0, t1, t2, t3, t4 = t[0], t[1], t[2], t[3], t[4]
            for c in range(channels):
                b0, b1, b2, b3, b4 = t0[c], t1[c], t2[c], t3[c], t4[c]
                acc[c] += b0 * s0[c] + b1 * s1[c] + b2 * s2[c] + b3 * s3[c] + b4 * s4[c]
                bcc[c] += b0 * q0[c] + b1 * q1[c] + b2 * q2[c] + b3 * q3[c] + b4 * q4[c]
        else:
            for j in range(k_w):
                src, other, tap = r[x0 + j * dw], r[x0 + sw + j * dw], t[j]
                for c in range(channels):
                    acc[c] += tap[c] * src[c]
                    bcc[c] += tap[c] * other[c]


_pixel = jit_activation.inline(_pixel) or _pixel
_pair = jit_activation.inline(_pair) or _pair


def _channels_last(x, w, b, has_bias, out, image, taps, sums, sh, sw, dh, dw, top, left, code, a0, a1):  # type: ignore[no-untyped-def]
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    k_h, k_w = w.shape[2], w.shape[3]
    rows, cols = image.shape[0], image.shape[1]
    for c in range(channels):
        for i in range(k_h):
            for j in range(k_w):
                taps[i * k_w + j, c] = w[c, 0, i, j]
        taps[k_h * k_w, c] = b[c] if has_bias else np.float32(0.0)  # the bias row after the taps
    bias = taps[k_h * k_w]
    # The pads only: each image overwrites the interior.
    for y in range(rows):
        for xx in range(cols):
            if top <= y < top + height and left <= xx < left + width:
                continue
            pixel = image[y, xx]
            for c in range(channels):
                pixel[c] = np.float32(0.0)
    for n in range(batch):
        # The whole image is read before any output is written (over its own input: `direct`).
        # Transposed CB channels by four pixels at a time: four contiguous stores per channel
        # read, the CB planes' lines staying in L1 across the row.
        for c0 in range(0, channels, CB):
            c1 = min(c0 + CB, channels)
            for y in range(height):
                line = image[top + y]
                xx = 0
                while xx + 4 <= width:
                    d0, d1, d2, d3 = line[left + xx], line[left + xx + 1], line[left + xx + 2], line[left + xx + 3]
                    for c in range(c0, c1):
                        d0[c], d1[c] = x[n, c, y, xx], x[n, c, y, xx + 1]
                        d2[c], d3[c] = x[n, c, y, xx + 2], x[n, c, y, xx + 3]
                    xx += 4
                for q in range(xx, width):
                    d = line[left + q]
                    for c in range(c0, c1):
                        d[c] = x[n, c, y, q]
        for oy in range(out_h):
            # Two output pixels at a time: each tap's vector loaded once for both sums.
            for ox in range(0, out_w - 1, 2):
                _pair(
                    image,
                    taps,
                    bias,
                    sums[oy * out_w + ox],
                    sums[oy * out_w + ox + 1],
                    oy * sh,
                    ox * sw,
                    sw,
                    dh,
                    dw,
                    k_h,
                    k_w,
                )
            if out_w % 2:
                ox = out_w - 1
                _pixel(image, taps, bias, sums[oy * out_w + ox], oy * sh, ox * sw, dh, dw, k_h, k_w)
        activate(sums.reshape(-1), code, a0, a1)
        # Back to planes CB channels by four pixels at a time, as the image came in.
        for c0 in range(0, channels, CB):
            c1 = min(c0 + CB, channels)
            for oy in range(out_h):
                line = sums[oy * out_w : (oy + 1) * out_w]
                ox = 0
                while ox + 4 <= out_w:
                    s0, s1, s2, s3 = line[ox], line[ox + 1], line[ox + 2], line[ox + 3]
                    for c in range(c0, c1):
                        out[n, c, oy, ox], out[n, c, oy, ox + 1] = s0[c], s1[c]
                        out[n, c, oy, ox + 2], out[n, c, oy, ox + 3] = s2[c], s3[c]
                    ox += 4
                for q in range(ox, out_w):
                    s = line[q]
                    for c in range(c0, c1):
                        out[n, c, oy, q] = s[c]


channels_last = compiled(_channels_last) if activate is not None else None


def channels_last_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_channels_last`: the padded image, the taps and bias, channels-last,
    and the output's sums (every pixel's channels contiguous)."""
    dtype, channels = np.dtype(dtype), x_shape[1]
    (top, left), (bottom, right) = geo.begin, geo.end
    rows = max(top + x_shape[2] + bottom, (geo.out[0] - 1) * geo.strides[0] + geo.extent[0])
    cols = max(left + x_shape[3] + right, (geo.out[1] - 1) * geo.strides[1] + geo.extent[1])
    taps = geo.kernel[0] * geo.kernel[1] + 1  # and the bias
    return [((rows, cols, channels), dtype), ((taps, channels), dtype), ((geo.out[0] * geo.out[1], channels), dtype)]


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
