"""Compiled depthwise 2-D Conv channels-last: for many channels over small maps (7 wide).

The image is transposed into (H*W, C) scratch, 16 channels by 16 pixels at a time in
registers (`transpose16`: about 0.1 ns an element where element-wise copies took 0.3), its
rows copied into a zero-padded (H, W, C) image, the taps and bias into rows of C; two output
pixels per pass, each a vector loop over the channels that loads each tap once for both sums
(3x3 in one pass, 5x5 one per kernel row); the whole image's sums activated in one loop and
transposed back the same way. The whole image is read before any output is written, so the
output may lie over the input (`runtime.kernels.planes`, direct).
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import jit_activation
from runtime.kernels._jit import ENABLED, compiled
from runtime.kernels.jit_activation import activate
from runtime.kernels.window import Geometry

transpose16 = move = None
if ENABLED:
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    _LO = [k // 2 + (k % 2) * 16 for k in range(16)]  # the first halves of two rows, interleaved
    _HI = [8 + k // 2 + (k % 2) * 16 for k in range(16)]  # and their second halves

    @intrinsic
    def transpose16(typingctx, src, src_at, src_step, dst, dst_at, dst_step):  # type: ignore[no-untyped-def]
        """dst[dst_at + j * dst_step + i] = src[src_at + i * src_step + j] for i, j < 16 (float32
        arrays): sixteen vector loads, four rounds of interleaving row i with row i + 8 (after
        log2 16 rounds the rows are the columns), sixteen vector stores."""
        signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            vector = ir.VectorType(ir.FloatType(), 16)
            masks = [ir.Constant(ir.VectorType(ir.IntType(32), 16), m) for m in (_LO, _HI)]

            def address(array_type, array, at, step, i):  # type: ignore[no-untyped-def]
                data = context.make_array(array_type)(context, builder, array).data
                index = builder.add(at, builder.mul(step, ir.Constant(step.type, i)))
                return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())

            rows = [builder.load(address(sig.args[0], args[0], args[1], args[2], i), align=4) for i in range(16)]
            for _ in range(4):
                rows = [builder.shuffle_vector(rows[i // 2], rows[i // 2 + 8], masks[i % 2]) for i in range(16)]
            for j in range(16):
                builder.store(rows[j], address(sig.args[3], args[3], args[4], args[5], j), align=4)
            return context.get_dummy_value()

        return signature, codegen

    @intrinsic
    def move(typingctx, src, src_at, dst, dst_at):  # type: ignore[no-untyped-def]
        """dst's element dst_at = src's element src_at, counted from each array's first element
        whatever its shape and strides (`transpose16`'s edges)."""
        signature = types.void(src, types.intp, dst, types.intp)

        def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
            source = context.make_array(sig.args[0])(context, builder, args[0]).data
            target = context.make_array(sig.args[2])(context, builder, args[2]).data
            builder.store(builder.load(builder.gep(source, [args[1]])), builder.gep(target, [args[3]]))
            return context.get_dummy_value()

        return signature, codegen


def _transpose(src, s_at, s_step, dst, d_at, d_step, rows, cols):  # type: ignore[no-untyped-def]
    """dst[d_at + j * d_step + i] = src[s_at + i * s_step + j] for i < rows, j < cols, offsets
    counted in elements from each float32 array's first one (any shape: a session's planes may
    lie apart): 16 x 16 blocks in registers, the edges one element at a time."""
    i = 0
    while i + 16 <= rows:
        j = 0
        while j + 16 <= cols:
            transpose16(src, s_at + i * s_step + j, s_step, dst, d_at + j * d_step + i, d_step)
            j += 16
        for jj in range(j, cols):
            for ii in range(i, i + 16):
                move(src, s_at + ii * s_step + jj, dst, d_at + jj * d_step + ii)
        i += 16
    for ii in range(i, rows):
        for jj in range(cols):
            move(src, s_at + ii * s_step + jj, dst, d_at + jj * d_step + ii)


_transpose = jit_activation.inline(_transpose) or _transpose


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


def _quad(image, taps, bias, sums, first, y0, x0, sw, dh):  # type: ignore[no-untyped-def]
    """`_pixel` for four neighbouring pixels of a 5x5 filter at stride 1 or 2, sums[first] to
    sums[first + 3], in one pass per kernel row: the row's image vectors and tap vectors loaded
    once for all four (at stride 1, 13 loads for 20 multiply-adds, where a pair takes 15 for
    10: 0.77x to 0.81x the time on 14- and 28-wide maps; 3x3 filters gained nothing)."""
    channels = bias.shape[0]
    a, b, c, d = sums[first], sums[first + 1], sums[first + 2], sums[first + 3]
    for k in range(channels):
        a[k] = bias[k]
        b[k] = bias[k]
        c[k] = bias[k]
        d[k] = bias[k]
    for i in range(5):
        r, t = image[y0 + i * dh], taps[i * 5 : i * 5 + 5]
        t0, t1, t2, t3, t4 = t[0], t[1], t[2], t[3], t[4]
        if sw == 1:
            v0, v1, v2, v3, v4, v5, v6, v7 = (
                r[x0],
                r[x0 + 1],
                r[x0 + 2],
                r[x0 + 3],
                r[x0 + 4],
                r[x0 + 5],
                r[x0 + 6],
                r[x0 + 7],
            )
            for k in range(channels):
                w0, w1, w2, w3, w4 = t0[k], t1[k], t2[k], t3[k], t4[k]
                e0, e1, e2, e3, e4, e5, e6, e7 = v0[k], v1[k], v2[k], v3[k], v4[k], v5[k], v6[k], v7[k]
                a[k] += w0 * e0 + w1 * e1 + w2 * e2 + w3 * e3 + w4 * e4
                b[k] += w0 * e1 + w1 * e2 + w2 * e3 + w3 * e4 + w4 * e5
                c[k] += w0 * e2 + w1 * e3 + w2 * e4 + w3 * e5 + w4 * e6
                d[k] += w0 * e3 + w1 * e4 + w2 * e5 + w3 * e6 + w4 * e7
        else:  # columns x0 to x0 + 10: pixel p reads 2p to 2p + 4
            v0, v1, v2, v3, v4, v5 = r[x0], r[x0 + 1], r[x0 + 2], r[x0 + 3], r[x0 + 4], r[x0 + 5]
            v6, v7, v8, v9, v10 = r[x0 + 6], r[x0 + 7], r[x0 + 8], r[x0 + 9], r[x0 + 10]
            for k in range(channels):
                w0, w1, w2, w3, w4 = t0[k], t1[k], t2[k], t3[k], t4[k]
                e0, e1, e2, e3, e4, e5 = v0[k], v1[k], v2[k], v3[k], v4[k], v5[k]
                e6, e7, e8, e9, e10 = v6[k], v7[k], v8[k], v9[k], v10[k]
                a[k] += w0 * e0 + w1 * e1 + w2 * e2 + w3 * e3 + w4 * e4
                b[k] += w0 * e2 + w1 * e3 + w2 * e4 + w3 * e5 + w4 * e6
                c[k] += w0 * e4 + w1 * e5 + w2 * e6 + w3 * e7 + w4 * e8
                d[k] += w0 * e6 + w1 * e7 + w2 * e8 + w3 * e9 + w4 * e10


def _pair3(fi, ft, fs, channels, cols, first, y0, x0, sw, dh, dw):  # type: ignore[no-untyped-def]
    """`_pair` for a 3x3 filter over the flat image, taps and sums, indexed by unsigned offsets:
    no view of a row (a pair made thirty)."""
    n = np.uint64(channels)
    rs, cs, a = np.uint64(dh * cols) * n, np.uint64(dw) * n, np.uint64(y0 * cols + x0) * n
    a0, a1, a2 = a, a + cs, a + cs + cs
    a3, a4, a5, a6, a7, a8 = a0 + rs, a1 + rs, a2 + rs, a0 + rs + rs, a1 + rs + rs, a2 + rs + rs
    step = np.uint64(sw) * n  # to the second pixel's window
    t1, t2, t3, t4, t5 = n, n + n, np.uint64(3) * n, np.uint64(4) * n, np.uint64(5) * n
    t6, t7, t8, t9 = np.uint64(6) * n, np.uint64(7) * n, np.uint64(8) * n, np.uint64(9) * n
    o, p = np.uint64(first) * n, np.uint64(first + 1) * n
    for c in range(channels):
        u = np.uint64(c)
        w0, w1, w2, w3, w4 = ft[u], ft[t1 + u], ft[t2 + u], ft[t3 + u], ft[t4 + u]
        w5, w6, w7, w8, z = ft[t5 + u], ft[t6 + u], ft[t7 + u], ft[t8 + u], ft[t9 + u]
        fs[o + u] = (
            z + w0 * fi[a0 + u] + w1 * fi[a1 + u] + w2 * fi[a2 + u] + w3 * fi[a3 + u] + w4 * fi[a4 + u]
            + w5 * fi[a5 + u] + w6 * fi[a6 + u] + w7 * fi[a7 + u] + w8 * fi[a8 + u]
        )  # fmt: skip
        v = u + step
        fs[p + u] = (
            z + w0 * fi[a0 + v] + w1 * fi[a1 + v] + w2 * fi[a2 + v] + w3 * fi[a3 + v] + w4 * fi[a4 + v]
            + w5 * fi[a5 + v] + w6 * fi[a6 + v] + w7 * fi[a7 + v] + w8 * fi[a8 + v]
        )  # fmt: skip


_pixel = jit_activation.inline(_pixel) or _pixel
_pair3 = jit_activation.inline(_pair3) or _pair3
_quad = jit_activation.inline(_quad) or _quad
_pair = jit_activation.inline(_pair) or _pair


def _channels_last(x, w, b, has_bias, out, image, taps, sums, sh, sw, dh, dw, top, left, code, a0, a1):  # type: ignore[no-untyped-def]
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    # Items and planes may lie apart (over the input), each plane contiguous: strides in elements.
    x_item, x_plane, out_item, out_plane = (
        x.strides[0] // 4,
        x.strides[1] // 4,
        out.strides[0] // 4,
        out.strides[1] // 4,
    )
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
    pixels = height * width
    staged, whole, flat_taps = sums.reshape(-1), image.reshape(-1), taps.reshape(-1)
    for n in range(batch):
        # The whole image read before any output is written: transposed into the sums' rows,
        # then each image row (width * C contiguous values) copied into the padded image.
        _transpose(x, n * x_item, x_plane, staged, 0, channels, channels, pixels)
        for y in range(height):
            at, start = np.uint64(((top + y) * cols + left) * channels), np.uint64(y * width * channels)
            for q in range(width * channels):
                whole[at + np.uint64(q)] = staged[start + np.uint64(q)]
        for oy in range(out_h):
            # Four output pixels at a time (5x5), then two, then one: each tap's vector loaded once for all.
            quads = out_w // 4 * 4 if k_h == 5 and k_w == 5 and sw <= 2 and dw == 1 else 0
            for ox in range(0, quads, 4):
                _quad(image, taps, bias, sums, oy * out_w + ox, oy * sh, ox * sw, sw, dh)
            for ox in range(quads, out_w - 1, 2):
                if k_h == 3 and k_w == 3:
                    _pair3(whole, flat_taps, staged, channels, cols, oy * out_w + ox, oy * sh, ox * sw, sw, dh, dw)
                    continue
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
            if (out_w - quads) % 2:
                ox = out_w - 1
                _pixel(image, taps, bias, sums[oy * out_w + ox], oy * sh, ox * sw, dh, dw, k_h, k_w)
        done = out_h * out_w
        activate(staged[: done * channels], code, a0, a1)
        _transpose(staged, 0, channels, out, n * out_item, out_plane, done, channels)


channels_last = compiled(_channels_last) if activate is not None and move is not None else None


def channels_last_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_channels_last`: the padded image, the taps and bias, channels-last,
    and the output's sums (every pixel's channels contiguous), which first hold the transposed
    image (as many rows as the larger of the two)."""
    dtype, channels = np.dtype(dtype), x_shape[1]
    (top, left), (bottom, right) = geo.begin, geo.end
    rows = max(top + x_shape[2] + bottom, (geo.out[0] - 1) * geo.strides[0] + geo.extent[0])
    cols = max(left + x_shape[3] + right, (geo.out[1] - 1) * geo.strides[1] + geo.extent[1])
    taps = geo.kernel[0] * geo.kernel[1] + 1  # and the bias
    pixels = max(geo.out[0] * geo.out[1], x_shape[2] * x_shape[3])  # the sums, and the image on its way in
    return [((rows, cols, channels), dtype), ((taps, channels), dtype), ((pixels, channels), dtype)]


def conv_channels_last(x, w, b, out, geo: Geometry, image, taps, rows, act: tuple[int, float, float]) -> None:
    """`out` = act(depthwise Conv(x, w) + b) channels-last: for many channels over small maps,
    each tap one vector loop over the channels; the blocks are `channels_last_layout`'s. Each
    plane of `x` and `out` is contiguous; planes and items may lie apart (`planes`)."""
    loop, arguments = channels_last_call(x, w, b, out, geo, image, taps, rows, act)
    loop(*arguments)


def channels_last_call(x, w, b, out, geo: Geometry, image, taps, rows, act: tuple[int, float, float]) -> tuple:
    """(the compiled loop, its arguments) of `conv_channels_last`: a bound call makes them once."""
    assert channels_last is not None
    code, p0, p1 = act
    x, w, bias = read_only(x), read_only(w), read_only(w.reshape(-1) if b is None else b)
    return channels_last, (
        x, w, bias, b is not None, out, image, taps, rows,
        geo.strides[0], geo.strides[1], geo.dilations[0], geo.dilations[1], geo.begin[0], geo.begin[1],
        code, p0, p1,
    )  # fmt: skip


def read_only(a: np.ndarray) -> np.ndarray:
    """`a`, or a read-only view of it: the loop is compiled for read-only inputs (a session's
    tensors are), so that one compilation serves every call."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view
