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

Many channels over a small output (7 wide) run channels-last instead
(`runtime.kernels.conv.jit_channels_last`).

Over its own input (`runtime.kernels.planes`: the output starts at the input's first byte,
each plane no larger than the input's), output plane c covers only input planes up to c,
and input plane c has been copied into the sub-planes before any of output plane c is
written: the route is `direct` (no chunk scratch).
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels import jit_activation
from runtime.kernels._jit import ENABLED, compiled
from runtime.kernels.conv.jit_channels_last import channels_last as channels_last
from runtime.kernels.conv.jit_channels_last import channels_last_call as channels_last_call
from runtime.kernels.conv.jit_channels_last import channels_last_layout as channels_last_layout
from runtime.kernels.conv.jit_channels_last import conv_channels_last as conv_channels_last
from runtime.kernels.conv.jit_channels_last import read_only
from runtime.kernels.jit_activation import DTYPE, activate, activate_row
from runtime.kernels.window import Geometry

TILE = 2048  # output positions summed at a time: 8 KiB of float32, in L1 beside the rows the taps read


split16 = split8 = copy16 = None
if ENABLED:
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def _splitter(lanes: int):  # type: ignore[no-untyped-def]
        @intrinsic
        def split(typingctx, src, src_at, dst, even_at, odd_at):  # type: ignore[no-untyped-def]
            """dst[even_at + k] = src[src_at + 2k] and dst[odd_at + k] = src[src_at + 2k + 1] for
            k < lanes, offsets in elements from each float32 array's first: one vector load, two
            shuffles, two stores (the loop over a row's pairs vectorised only past 32 pairs, and
            split rows of 14 to 56 pairs at 0.2 to 0.3 ns an element)."""
            signature = types.void(src, types.intp, dst, types.intp, types.intp)

            def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
                pair, half = ir.VectorType(ir.FloatType(), 2 * lanes), ir.VectorType(ir.FloatType(), lanes)
                source = context.make_array(sig.args[0])(context, builder, args[0]).data
                target = context.make_array(sig.args[2])(context, builder, args[2]).data
                both = builder.load(builder.bitcast(builder.gep(source, [args[1]]), pair.as_pointer()), align=4)
                for at, parity in ((args[3], 0), (args[4], 1)):
                    mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [2 * k + parity for k in range(lanes)])
                    picked = builder.shuffle_vector(both, both, mask)
                    builder.store(picked, builder.bitcast(builder.gep(target, [at]), half.as_pointer()), align=4)
                return context.get_dummy_value()

            return signature, codegen

        return split

    split16, split8 = _splitter(16), _splitter(8)

    @intrinsic
    def copy16(typingctx, src, src_at, dst, dst_at):  # type: ignore[no-untyped-def]
        """dst[dst_at + k] = src[src_at + k] for k < 16, offsets as `split`'s: rows copied 16 values
        at a time, the last chunk overlapping the one before, with no remainder loop and no
        runtime check that the two arrays are apart (a loop over a 28- to 112-value row had both)."""
        signature = types.void(src, types.intp, dst, types.intp)

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            vector = ir.VectorType(ir.FloatType(), 16).as_pointer()
            source = context.make_array(sig.args[0])(context, builder, args[0]).data
            target = context.make_array(sig.args[2])(context, builder, args[2]).data
            value = builder.load(builder.bitcast(builder.gep(source, [args[1]]), vector), align=4)
            builder.store(value, builder.bitcast(builder.gep(target, [args[3]]), vector), align=4)
            return context.get_dummy_value()

        return signature, codegen


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
                    if width >= 16 and x.strides[3] == 4:
                        for q0 in range(0, width, 16):
                            q = min(q0, width - 16)
                            copy16(src, q, flat, row + left + q)
                    else:
                        for q in range(width):
                            flat[row + left + q] = src[q]
                    continue
                if sw == 2:
                    # Columns 2k and 2k + 1 go to the two parities, 16 or 8 pairs at a time in
                    # registers, the last chunk overlapping the one before (the same values again).
                    e, o, half = (
                        row + (left % 2) * per + left // 2,
                        row + (1 - left % 2) * per + (left + 1) // 2,
                        width // 2,
                    )
                    lanes = 16 if half >= 16 else 8
                    if half >= 8 and x.strides[3] == 4:
                        for k0 in range(0, half, lanes):
                            k = min(k0, half - lanes)
                            if lanes == 16:
                                split16(src, 2 * k, flat, e + k, o + k)
                            else:
                                split8(src, 2 * k, flat, e + k, o + k)
                    else:
                        for k in range(half):
                            flat[e + k] = src[2 * k]
                            flat[o + k] = src[2 * k + 1]
                    if width % 2:
                        flat[e + half] = src[width - 1]
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
            at = n * (out.strides[0] // 4) + c * (out.strides[1] // 4)  # the plane's first element
            whole_rows = out_w >= 16 and out.strides[3] == 4 and out.strides[2] == 4 * out_w
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
                    first = (oy - oy0) * wq
                    if whole_rows:
                        for q0 in range(0, out_w, 16):
                            q = min(q0, out_w - 16)
                            copy16(acc, first + q, out, at + oy * out_w + q)
                    else:
                        line, u = plane[oy], np.uint64(first)
                        for q in range(out_w):
                            line[np.uint64(q)] = acc[u + np.uint64(q)]


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
    loop, arguments = depthwise_call(x, w, b, out, geo, subs, acc, act)
    loop(*arguments)


def depthwise_call(x, w, b, out, geo: Geometry, subs, acc, act: tuple[int, float, float]) -> tuple:
    """(the compiled loop, its arguments) of `conv_depthwise_compiled`: a bound call makes them once."""
    assert depthwise is not None
    code, p0, p1 = act
    x, w, bias = read_only(x), read_only(w), read_only(w.reshape(-1) if b is None else b)
    return depthwise, (
        x, w, bias, b is not None, out, subs, acc,
        geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.begin[0], geo.begin[1],
        code, p0, p1,
    )  # fmt: skip


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
