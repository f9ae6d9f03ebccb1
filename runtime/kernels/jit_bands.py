"""A float32 tiled stage's band steps as one compiled call (numba, when the compiled loops are on):
an interpreter that walks an int64-coded list of operations over the arena, the stage's input
when it lies outside the arena, and the steps' weights (`runtime.tiling.band_program` writes it).

A stage of a hundred bands is a thousand or more small steps, each a few microseconds of work; the
step loop spends as much again in Python per step (the bound call, its views, a compiled loop's
dispatch, a BLAS call from numpy). Here each step is a record ``[opcode, record length, fields...]``:

* ``ZERO``: a strided 4-D block of the arena set to 0 (a window's padding columns);
* ``COPY``: a strided 4-D block copied (TileRows: rows gathered into a window, carried, placed);
* ``CONV``: a 2-D convolution of NCHW maps (pointwise by one matmul, depthwise by the step loop's
  compiled loops, dense by `jit_conv.im2col_band` and one matmul), then its bias, an optional
  residual and its activation;
* ``ADD``: a + b, or Relu(a) (b's space -1), element by element over maps of one shape (the output
  may be an input's memory);
* ``MAXPOOL``: a 2-D max pool of an NCHW map (into scratch first when its output lies over its input).

An operand is a pair (space, element offset): space 0 the arena, 1 the stage's input beside it.
Maps are read through `frozen`, a read-only view of the arena (and `outer`, read-only too), so that
the step loop's compiled loops called from here have the types the step loop calls them with, and
their compiled code (in numba's cache) serves both.
A convolution computes into scratch when its output lies over one of its inputs (the plan may
put a band's output over its input), straight into its output otherwise. A step's scratch is the
workspace the plan gave it in the arena (space 0), or `scratch` beside it (space 2) when the plan
gave none: the step loop's shared scratch is beside the arena then too. The interpreter allocates
nothing and returns 0, or the record's index plus one when it meets an opcode it does not know.
Compiled once per machine (``cache=True``), whatever the model.
"""

from __future__ import annotations

import numpy as np

from runtime.kernels import jit_activation
from runtime.kernels._jit import compiled
from runtime.kernels.conv import jit_conv, jit_depthwise

ZERO, COPY, CONV, ADD, MAXPOOL = 1, 2, 3, 4, 5
POINTWISE, DEPTHWISE, DENSE = 0, 1, 2
DTYPE = np.dtype(np.float32)


def _zero(dst, at, code, f):  # type: ignore[no-untyped-def]
    """dst's 4-D block at `at` (counts and strides in elements: code[f:f + 8]) = 0."""
    n0, n1, n2, n3 = code[f], code[f + 1], code[f + 2], code[f + 3]
    s0, s1, s2, s3 = code[f + 4], code[f + 5], code[f + 6], code[f + 7]
    zero = np.float32(0.0)
    for a in range(n0):
        for b in range(n1):
            for c in range(n2):
                row = _u(at + a * s0 + b * s1 + c * s2)
                for d in range(_u(n3)):
                    dst[row + d * _u(s3)] = zero


def _copy(dst, at, src, start, code, f):  # type: ignore[no-untyped-def]
    """dst's block at `at` (code[f:f + 8]) = src's block at `start` (strides code[f + 8:f + 12]).
    Indices unsigned (no wraparound check), so a row's copy vectorises."""
    n0, n1, n2, n3 = code[f], code[f + 1], code[f + 2], code[f + 3]
    d0, d1, d2, d3 = code[f + 4], code[f + 5], code[f + 6], code[f + 7]
    s0, s1, s2, s3 = code[f + 8], code[f + 9], code[f + 10], code[f + 11]
    for a in range(n0):
        for b in range(n1):
            for c in range(n2):
                out = _u(at + a * d0 + b * d1 + c * d2)
                inp = _u(start + a * s0 + b * s1 + c * s2)
                if d3 == 1 and s3 == 1:
                    for d in range(_u(n3)):
                        dst[out + d] = src[inp + d]
                else:
                    for d in range(_u(n3)):
                        dst[out + d * _u(d3)] = src[inp + d * _u(s3)]


def _depthwise(x, w, bias, has_bias, y, scratch, code, f, dims, act, p0, p1):  # type: ignore[no-untyped-def]
    """A depthwise conv of one image by `jit_depthwise`'s loops over sub-planes (code[f] == 0) or
    channels-last (1), its three scratch blocks' shapes in code[f + 1:f + 10]: the step loop's
    route for these shapes, so the same sums. The loops read each channel's plane before writing
    its output plane, so y may lie over x from its first byte, as the plan may put it."""
    channels, height, width, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl = dims
    x4, y4 = x.reshape(1, channels, height, width), y.reshape(1, channels, oh, ow)
    w4 = w.reshape(channels, 1, kh, kw)
    a = code[f + 1] * code[f + 2] * code[f + 3]
    b = a + code[f + 4] * code[f + 5] * code[f + 6]
    c = b + code[f + 7] * code[f + 8] * code[f + 9]
    first = scratch[:a].reshape(code[f + 1], code[f + 2], code[f + 3])
    if code[f] == 0:
        _sub_planes(x4, w4, bias, has_bias, y4, first, scratch[a:b], sh, sw, dh, dw, pt, pl, act, p0, p1)
    else:
        taps = scratch[a:b].reshape(code[f + 4], code[f + 5] * code[f + 6])
        sums = scratch[b:c].reshape(code[f + 7], code[f + 8] * code[f + 9])
        _channels_last(x4, w4, bias, has_bias, y4, first, taps, sums, sh, sw, dh, dw, pt, pl, act, p0, p1)


def _finish(src, so, step, dst, do, plane, res, ro, filters, count, bias, has_bias, act, p0, p1):  # type: ignore[no-untyped-def]
    """dst[do + f * plane:][:count] = act(src[so + f * step:][:count] + bias[f] (+ res[ro + f * plane:]
    when ro >= 0)) for each of `filters` rows, over flat offsets (a row's slice of a 2-D view cost
    more than a band's row of sums); element by element, so dst may be src's or res's own memory."""
    zero, lo, hi = np.float32(0.0), np.float32(p0), np.float32(p1)
    for f in range(filters):
        b = bias[f] if has_bias else zero
        s, d = _u(so + f * step), _u(do + f * plane)
        if ro >= 0:
            r = _u(ro + f * plane)
            for i in range(_u(count)):
                dst[d + i] = src[s + i] + b + res[r + i]
        elif has_bias or s != d:
            for i in range(_u(count)):
                dst[d + i] = src[s + i] + b
        if act == RELU:
            for i in range(_u(count)):
                v = dst[d + i]
                dst[d + i] = zero if v < zero else v
        elif act == CLIP:
            for i in range(_u(count)):
                v = dst[d + i]
                v = lo if v < lo else v
                dst[d + i] = hi if v > hi else v
        elif act != NONE:
            _activate(dst[d : d + _u(count)], act, p0, p1)


def _conv(arena, frozen, outer, weights, params, code, f, scratch):  # type: ignore[no-untyped-def]
    """One CONV record (fields from code[f]; see `runtime.tiling.band_program` for their order)."""
    xs, xo, batch, channels = code[f], code[f + 1], code[f + 2], code[f + 3]
    height, width, yo, filters = code[f + 4], code[f + 5], code[f + 6], code[f + 7]
    oh, ow, wi, bi, kind = code[f + 8], code[f + 9], code[f + 10], code[f + 11], code[f + 12]
    kh, kw, sh, sw = code[f + 13], code[f + 14], code[f + 15], code[f + 16]
    dh, dw, pt, pl = code[f + 17], code[f + 18], code[f + 19], code[f + 20]
    act, pi, ro, direct = code[f + 21], code[f + 22], code[f + 23], code[f + 24]
    sc = arena[code[f + 26] :] if code[f + 25] == 0 else scratch[code[f + 26] :]
    x_all = frozen if xs == 0 else outer
    w = weights[wi]
    has_bias = bi >= 0
    bias = weights[bi] if has_bias else w
    p0, p1 = params[pi], params[pi + 1]
    plane, size = oh * ow, channels * height * width
    for n in range(batch):
        x = x_all[xo + n * size : xo + (n + 1) * size]
        at = yo + n * filters * plane
        y = arena[at : at + filters * plane].reshape(filters, plane)
        residual = ro + n * filters * plane if ro >= 0 else -1
        if kind == DEPTHWISE:  # one image: the step loop's own loops, bias and activation included
            dims = (channels, height, width, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl)
            _depthwise_step(x, w, bias, has_bias, y, sc, code, f + 27, dims, act, p0, p1)
        elif kind == POINTWISE and not direct and code[f + 27] < plane:
            # over its input from the same first byte, scratch short of the whole result: columns
            # [s, e) of every plane at a time, their input copied out first; writing them overwrites
            # only those columns of the input, already read
            chunk = code[f + 27]
            for s0 in range(0, plane, chunk):
                m = min(chunk, plane - s0)
                part = sc[: channels * m]
                for c in range(channels):
                    for i in range(_u(m)):
                        part[_u(c * m) + i] = x[_u(c * plane + s0) + i]
                acc = sc[channels * m : (channels + filters) * m]
                np.dot(w.reshape(filters, channels), part.reshape(channels, m), acc.reshape(filters, m))
                r0 = residual + s0 if ro >= 0 else -1
                _epilogue(acc, 0, m, arena, at + s0, plane, arena, r0, filters, m, bias, has_bias, act, p0, p1)
        else:
            acc = y if direct else sc[: filters * plane].reshape(filters, plane)
            if kind == POINTWISE:
                np.dot(w.reshape(filters, channels), x.reshape(channels, height * width), acc)
            else:
                depth = channels * kh * kw
                first = 0 if direct else filters * plane  # the columns follow the result when it is in scratch
                col = sc[first : first + depth * plane]
                _im2col(x.reshape(channels, height, width), col, 0, oh, kh, kw, sh, sw, dh, dw, pt, pl, ow)
                np.dot(w.reshape(filters, depth), col.reshape(depth, plane), acc)
            source, start = (arena, at) if direct else (sc, 0)
            _epilogue(
                source, start, plane, arena, at, plane, arena, residual, filters, plane, bias, has_bias, act, p0, p1
            )


def _add(arena, frozen, outer, code, f):  # type: ignore[no-untyped-def]
    """ADD: code[f:f + 6] = a's (space, offset), b's (space -1: Relu of a alone), y's offset, count."""
    a = frozen if code[f] == 0 else outer
    b = frozen if code[f + 2] == 0 else outer
    ao, bo, yo, n = _u(code[f + 1]), _u(code[f + 3]), _u(code[f + 4]), _u(code[f + 5])
    zero = np.float32(0.0)
    if code[f + 2] < 0:
        for i in range(n):
            v = a[ao + i]
            arena[yo + i] = zero if v < zero else v
        return
    for i in range(n):
        arena[yo + i] = a[ao + i] + b[bo + i]


def _max_pool(arena, frozen, outer, code, f, scratch):  # type: ignore[no-untyped-def]
    """MAXPOOL: code[f:f + 15] = x's (space, offset), C, H, W, y's offset, OH, OW, kh, kw, sh, sw,
    pt, pl, whether y lies over x (then summed into scratch, then copied). NaN propagates."""
    x = frozen if code[f] == 0 else outer
    xo, channels, height, width, yo, oh, ow = (
        code[f + 1],
        code[f + 2],
        code[f + 3],
        code[f + 4],
        code[f + 5],
        code[f + 6],
        code[f + 7],
    )
    kh, kw, sh, sw, pt, pl, over = (
        code[f + 8],
        code[f + 9],
        code[f + 10],
        code[f + 11],
        code[f + 12],
        code[f + 13],
        code[f + 14],
    )
    sc = arena[code[f + 16] :] if code[f + 15] == 0 else scratch[code[f + 16] :]
    y, at = (sc, 0) if over else (arena, yo)
    for c in range(channels):
        for oy in range(oh):
            for ox in range(ow):
                m = -np.inf
                for i in range(kh):
                    iy = oy * sh - pt + i
                    if 0 <= iy < height:
                        for j in range(kw):
                            ix = ox * sw - pl + j
                            if 0 <= ix < width:
                                v = x[xo + (c * height + iy) * width + ix]
                                if v > m or v != v:
                                    m = v
                y[at + (c * oh + oy) * ow + ox] = m
    if over:
        for i in range(_u(channels * oh * ow)):
            arena[_u(yo) + i] = sc[i]


def _run(arena, frozen, outer, weights, params, code, scratch):  # type: ignore[no-untyped-def]
    """Every record of `code` in order; 0, or the index plus one of a record it does not know."""
    at, index = 0, 0
    while at < code.size:
        op, f = code[at], at + 2
        if op == COPY:
            src = frozen if code[f + 14] == 0 else outer
            _copy_block(arena, code[f + 1], src, code[f + 15], code, f + 2)
        elif op == ZERO:
            _zero_block(arena, code[f + 1], code, f + 2)
        elif op == CONV:
            _conv_step(arena, frozen, outer, weights, params, code, f, scratch)
        elif op == ADD:
            _add_step(arena, frozen, outer, code, f)
        elif op == MAXPOOL:
            _max_pool_step(arena, frozen, outer, code, f, scratch)
        else:
            return index + 1
        at += code[at + 1]
        index += 1
    return 0


_im2col, _activate = jit_conv.im2col_band, jit_activation.activate
NONE, RELU, CLIP = jit_activation.NONE, jit_activation.RELU, jit_activation.CLIP
RUN = None
if _activate is not None:
    from runtime.kernels._jit import numba

    _u = compiled(lambda i: numba.uint64(i), inline=True)  # an index known not negative
    _zero_block = compiled(_zero)
    _copy_block = compiled(_copy)
    _sub_planes, _channels_last = jit_depthwise.depthwise, jit_depthwise.channels_last
    _depthwise_step = compiled(_depthwise)
    _epilogue = compiled(_finish)
    _conv_step = compiled(_conv)
    _add_step = compiled(_add)
    _max_pool_step = compiled(_max_pool)
    RUN = compiled(_run)
