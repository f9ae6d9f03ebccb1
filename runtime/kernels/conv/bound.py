"""A Conv's call bound once for a step's shapes and attributes (`runtime.kernels.planes.PlaneWise.bind`,
at a session's prepare): what `conv.convolve` works out on every call (route, geometry, the
activation's compiled code, whether the output may lie over the input) decided once, so that
a run of a small 1x1 conv (MobileNet's and EfficientNet's, a few us of arithmetic) goes
straight to its matmul and compiled epilogue, and a depthwise one straight to its compiled
loop (the general call's layers cost 13-19 us a step on MobileNetV3-Small's). Other routes
keep the general call. These are the `bind` of the pointwise and depthwise routes of
`conv_routes.ROUTES`, which Conv's bind hook and ConvAct's reach through `conv_routes.bind_conv`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from runtime.kernels import window
from runtime.kernels._scratch import Scratch, same_start, scratch_bytes, shared_scratch
from runtime.kernels.conv import dense as conv_dense
from runtime.kernels.conv import jit_conv, jit_phases, winograd
from runtime.kernels.conv.depthwise import compiled_call, compiled_layout, uses_compiled
from runtime.kernels.protocol import Bound
from runtime.kernels.same_arrays import SameArrays
from runtime.kernels.window import Geometry, small_columns, small_rows


def bind_depthwise(inputs, outputs, attrs: dict, conv, geo: Geometry, finish, slow) -> Bound | None:
    """The call of a depthwise Conv on the compiled route (`depthwise.conv_depthwise_compiled`),
    its geometry worked out once. The route reads each channel's plane before writing its
    output, so an output over the input takes the same call on one image; with more images
    such a call goes to `slow`, which runs them one at a time."""
    x, w, y = inputs[0], inputs[1], outputs[0] if outputs else None
    if x is None or w is None or y is None or len(x.shape) != 4 or jit_conv.spec_of(finish) is None:
        return None
    if not uses_compiled(geo, x.dtype):
        return None
    single = x.shape[0] == 1
    code, p0, p1 = jit_conv.spec_of(finish)  # type: ignore[misc]  # not None: checked above
    need = scratch_bytes(*compiled_layout(tuple(x.shape), geo, np.dtype(x.dtype)))

    def arguments(x, w, b, out, ws) -> tuple | None:
        """The compiled loop and its arguments (`depthwise.compiled_call`), its scratch views made
        here once; None for the general call."""
        if x is None or out is None or (not single and np.may_share_memory(x, out)):
            return None  # an input not bound at prepare (a graph input) is made on the first run
        return compiled_call(x, w, b, out, geo, Scratch(ws, "Conv"), (code, p0, p1))

    made = SameArrays(arguments)

    def bound(x, w, b=None, *, out, ws=None, **given):
        call = made(x, w, b, out, shared_scratch(need) if ws is None else ws)
        if call is None:
            slow((x, w, b), out, ws, attrs)
            return
        call[0](*call[1])

    def prime(x, w, b=None, *, out, ws=None, **given):
        made(x, w, b, out, shared_scratch(need) if ws is None else ws)

    return Bound(bound, prime=prime)


def bind_pointwise(inputs, outputs, attrs: dict, conv, geo: Geometry, finish, slow) -> Bound | None:
    """The call of a Conv (with `finish`, its activation carrying its compiled code, for
    ConvAct) on the pointwise route, worked out once for these shapes and attributes
    (`PlaneWise.bind`): one matmul and one compiled epilogue per run, the pixel-wise route's
    chunks (`conv_over.conv_columns`) when the output starts at the input's first byte, the
    views of both made once per set of arrays (`SameArrays`); or None where the route is
    another (or compiled loops are off). `slow(inputs, out, ws, attrs)`, the general call,
    takes any other call whose output is over its input."""
    x, w, y = inputs[0], inputs[1], outputs[0] if outputs else None
    spec = jit_conv.spec_of(finish)
    if x is None or w is None or y is None or spec is None or not jit_conv.takes_epilogue(y.dtype):
        return None
    group = conv.group
    if group != 1 or len(x.shape) < 3:
        return None
    batch, channels, filters = x.shape[0], x.shape[1], w.shape[0]
    pixels = math.prod(geo.out)
    over = conv.over  # `conv_routes.writes_over_input`: an `OverRoute`, or None
    may_overlap = x.dtype == y.dtype and over is not None
    columns = may_overlap and over.pixel_wise
    (rows, step), _ = over.layout(x.shape, w.shape, y.dtype, geo)[0] if columns else ((0, 0), None)
    code, p0, p1 = spec
    bias_act, empty = jit_conv.bias_act, jit_conv.EMPTY

    def passes(x, w, b, out, ws) -> list | None:
        """Each run's matmuls as (weights, input, result, bias, has bias, image, start, stop, copy
        to): the epilogue runs over columns [start, stop) of `image`, which holds the result.
        None for the general call. Straight into `out` (in `small_columns` or `small_rows`
        chunks), or over the input a chunk of columns at a time through the workspace, as
        `conv_over.conv_columns`."""
        bias, has_bias = (empty, False) if b is None else (b, True)
        if x is None or out is None or not jit_conv.usable(x, out):
            return None  # an input not bound at prepare (a graph input) is made on the first run
        weights = w.reshape(filters, channels)
        sources, targets = x.reshape(batch, channels, pixels), out.reshape(batch, filters, pixels)
        over = may_overlap and np.may_share_memory(x, out)
        if over and (not columns or not same_start(x, out) or ws.size < rows * step * 4):
            return None
        spill = rows if over else 0  # the planes written straight start here
        made = []
        for n in range(batch):
            if spill < filters:  # over the input: the planes past its end, while it is whole
                image, part = targets[n, spill:], bias[spill:] if has_bias else empty
                width = small_columns(filters - spill, channels, pixels)
                for s in range(0, pixels, width):
                    e = min(pixels, s + width)
                    made.append((weights[spill:], sources[n, :, s:e], image[:, s:e], part, has_bias, image, s, e, None))
                if width == pixels:  # whole rows: in `small_rows` chunks instead
                    made[len(made) - 1 :] = _row_chunks(made[-1], channels, pixels)
            if not over:
                continue
            chunk = ws[: rows * step * 4].view(jit_conv.DTYPE)
            width = min(step, small_columns(rows, channels, pixels))
            part = bias[:rows] if has_bias else empty
            for s in range(0, pixels, width):
                m = min(width, pixels - s)
                block, target = chunk[: rows * m].reshape(rows, m), targets[n, :rows, s : s + m]
                made.append((weights[:rows], sources[n, :, s : s + m], block, part, has_bias, block, 0, m, target))
        return made

    made = SameArrays(passes)

    def bound(x, w, b=None, *, out, ws=None, **given):
        # Without a workspace (scratch outside the arena) the chunk is the thread's shared scratch.
        todo = made(x, w, b, out, shared_scratch(rows * step * 4) if ws is None else ws)
        if todo is None:
            slow((x, w, b), out, ws, attrs)
            return
        for weights, source, result, bias, has_bias, image, start, stop, copy_to in todo:
            np.matmul(weights, source, out=result)
            bias_act(image, bias, has_bias, start, stop, code, p0, p1)
            if copy_to is not None:  # over the input: these columns' bytes only, all read already
                np.copyto(copy_to, result)

    def prime(x, w, b=None, *, out, ws=None, **given):
        made(x, w, b, out, shared_scratch(rows * step * 4) if ws is None else ws)

    return Bound(bound, prime=prime)


def _row_chunks(whole: tuple, depth: int, pixels: int) -> list[tuple]:
    """A straight matmul's pass (see `passes`) as `small_rows` chunks of its rows."""
    weights, source, result, bias, has_bias, _, _, _, _ = whole
    rows = weights.shape[0]
    height = small_rows(rows, depth, pixels)
    return [
        (weights[r : r + height], source, result[r : r + height], bias[r : r + height] if has_bias else bias,
         has_bias, result[r : r + height], 0, pixels, None)
        for r in range(0, rows, height)
    ]  # fmt: skip


def bind_im2col(inputs, outputs, attrs: dict, conv, geo: Geometry, finish, slow) -> Bound | None:
    """The call of a dense 2-D float32 Conv on the im2col route's compiled bands
    (`dense.conv_im2col_compiled`), worked out once per set of arrays: each band's scratch
    views, fill arguments and matmuls made at prepare, so that a run is only the compiled fills,
    the matmuls and the compiled epilogues: a tiled stage's band of one or two output rows spent most of the
    general call in those layers, not in its arithmetic. None where Winograd would take the Conv (its call has its prepared weights) or
    the compiled loops do not apply; an output over the input goes to `slow`."""
    x, w, y = inputs[0], inputs[1], outputs[0] if outputs else None
    spec = jit_conv.spec_of(finish)
    if x is None or w is None or y is None or spec is None or len(x.shape) != 4 or len(geo.kernel) != 2:
        return None
    group = conv.group
    if not jit_conv.takes_im2col(geo, x.dtype) or np.dtype(y.dtype) != jit_conv.DTYPE:
        return None
    if winograd.takes(geo, x.shape, w.shape, group, x.dtype):
        return None
    batch, channels, filters = x.shape[0], x.shape[1], w.shape[0]
    rows = conv_dense.band_rows(geo, channels, x.dtype)
    row_pixels, kh, kw = geo.out[1], *geo.kernel
    phased = jit_conv.takes_phases(geo, x.dtype)
    code, p0, p1 = spec
    blocks = [((channels * kh * kw * rows * row_pixels,), x.dtype)]
    need = scratch_bytes(*blocks, *([(jit_phases.phase_shape(channels, rows, kh, kw, row_pixels), x.dtype)] * phased))

    def bands(x, w, b, out, ws) -> list | None:
        """Each band's (fill, fill arguments, matmuls, image, bias, has bias, start, stop)."""
        if x is None or out is None or not jit_conv.usable(x, out) or np.may_share_memory(x, out):
            return None  # an input not bound at prepare (a graph input) is made on the first run
        if x.size == 0 or out.size == 0:
            return None  # an empty map (a zero dim) has no band to cut: the general call does nothing
        scratch = Scratch(ws, "Conv")
        col = scratch.take((channels * kh * kw * rows * row_pixels,), x.dtype)
        phases = scratch.take(jit_phases.phase_shape(channels, rows, kh, kw, row_pixels), x.dtype) if phased else None
        per_group = w.reshape(group, filters // group, -1)
        bias, has_bias = (jit_conv.EMPTY, False) if b is None else (b, True)
        made = []
        for n in range(batch):
            image = out[n].reshape(filters, -1)
            target = image.reshape(group, filters // group, -1)
            for r in range(0, geo.out[0], rows):
                m = min(rows, geo.out[0] - r)
                band = col[: col.size // rows * m]
                fill: Any
                if phases is None:
                    fill = jit_conv.im2col_band
                    args = (x[n], band, r, m, kh, kw, *geo.strides, *geo.dilations, *geo.begin, row_pixels)
                else:
                    fill = jit_phases.im2col_stride2
                    args = (x[n], band, phases, r, m, kh, kw, *geo.begin, row_pixels)
                start, stop = r * row_pixels, (r + m) * row_pixels
                cols = band.reshape(group, -1, stop - start)
                chunks = window.column_chunks(filters // group, cols.shape[1], start, stop)
                matmuls = [(per_group, cols[:, :, s - start : e - start], target[:, :, s:e]) for s, e in chunks]
                made.append((fill, args, matmuls, image, bias, has_bias, start, stop))
        return made

    made = SameArrays(bands)
    bias_act = jit_conv.bias_act

    def bound(x, w, b=None, *, out, ws=None, **given):
        todo = made(x, w, b, out, shared_scratch(need) if ws is None else ws)
        if todo is None:
            slow((x, w, b), out, ws, attrs)
            return
        for fill, args, matmuls, image, bias, has_bias, start, stop in todo:
            fill(*args)
            for weights, cols, target in matmuls:
                np.matmul(weights, cols, out=target)
            bias_act(image, bias, has_bias, start, stop, code, p0, p1)

    def prime(x, w, b=None, *, out, ws=None, **given):
        made(x, w, b, out, shared_scratch(need) if ws is None else ws)

    return Bound(bound, prime=prime)
