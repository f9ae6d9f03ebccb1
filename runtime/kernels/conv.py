"""Conv and ConvInteger: im2col around one BLAS matmul per image (ConvTranspose: `conv_transpose`).

Conv copies each image's receptive fields into an im2col buffer carved from the workspace
(after copying the image into a zero-padded buffer when it has pads), then multiplies by
the weights, all groups in one batched matmul written straight into the output. A 1x1,
stride-1, unpadded, ungrouped conv is a plain matmul and takes no workspace at all.
The window geometry (pads, auto_pad, strides, dilations) is `runtime.kernels.window`'s, and the
route a Conv takes is decided once per shape by `runtime.kernels.conv_routes`, which the workspace
function, the call and the bound call (`runtime.kernels.conv_bound`) all read.
With compiled loops on, a float32 3x3 stride-1 ungrouped conv on a large enough map runs by
Winograd's F(2x2, 3x3) (`runtime.kernels.winograd`; not with ``prepared_weights=False``, as it
reads a transformed weight), and any other float32 2-D conv fills each band straight from the
unpadded image and adds the bias and the activation to each band's output right after its matmul
(`runtime.kernels.jit_conv`): no padded copy, one pass fewer over the output.

An ungrouped stride-1 Conv whose output keeps the input's size (1x1, or KxK 'same') may be
planned with its output over its input (`runtime.kernels.conv_over` states why that is
safe and when): called so, it runs the pixel-wise or row-lagged route, whose scratch the
workspace covers (the larger of it and the usual route's).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from runtime.kernels import (
    Bound,
    TensorMeta,
    jit_conv,
    jit_depthwise,
    jit_phases,
    jit_winograd,
    kernel,
    window,
    winograd,
)
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers, units_within
from runtime.kernels.conv_bound import bind_conv
from runtime.kernels.conv_over import conv_columns, conv_rows, over_layout
from runtime.kernels.conv_routes import CONV_PLANES, DENSE_ROUTES, ConvGeometry, conv_route
from runtime.kernels.depthwise import (
    DEPTHWISE_ROUTES,
    add_bias,
    channels_last_layout,
    compiled_layout,
    conv_depthwise_channels_last,
    conv_depthwise_compiled,
    conv_depthwise_rows,
    rows_layout,
    uses_compiled,
)
from runtime.kernels.window import Geometry, pad_into, windows


def _padded_shape(x_shape: tuple[int, ...], geo: Geometry) -> tuple[int, ...]:
    return tuple(i + b + e for i, b, e in zip(x_shape[2:], geo.begin, geo.end, strict=True))


def conv_workspace(
    inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
    prepared_weights=True,
) -> int:  # fmt: skip
    x, w, y = inputs[0], inputs[1], outputs[0]
    # Also fills the route cache at prepare, so that a run adds nothing to it beside the arena.
    c = ConvGeometry.of(x.shape, w.shape, y.shape, _attrs(auto_pad, dilations, group, kernel_shape, pads, strides))
    (geo, path), over = c.route, c.over
    own = _route_workspace(x, w, geo, path, group, prepared_weights)
    if over is None:
        return own
    return max(own, scratch_bytes(*over_layout(x.shape, w.shape, x.dtype, geo, over)))


def _route_workspace(x, w, geo: Geometry, path: str, group: int, prepared_weights: bool = True) -> int:
    if path in DENSE_ROUTES and prepared_weights and winograd.takes(geo, x.shape, w.shape, group, x.dtype):
        # the dense route's too: a call with a strided or non-float32 weight falls back to it
        return max(scratch_bytes(*winograd.layout(x.shape, w.shape, geo)), _route_workspace(x, w, geo, path, 0))
    if path in DEPTHWISE_ROUTES and uses_compiled(geo, x.dtype):
        return scratch_bytes(*compiled_layout(x.shape, geo, x.dtype))
    if path == "pointwise":
        return 0
    channels = x.shape[1]
    if path == "taps":
        return scratch_bytes(*_taps_layout(x.shape, w.shape, x.dtype, geo))
    if path == "rows":
        return scratch_bytes(*rows_layout(x.shape, geo, x.dtype))
    if path == "channels_last":
        return scratch_bytes(*channels_last_layout(x.shape, geo, x.dtype))
    if path == "depthwise":
        blocks = [((min(channels, _depthwise_block(geo, x.dtype)), *geo.kernel, *geo.out), x.dtype)]
    elif jit_conv.takes_im2col(geo, x.dtype):
        rows = _band_rows(geo, channels, x.dtype)
        col = ((channels, *geo.kernel, rows, *geo.out[1:]), x.dtype)
        if not jit_conv.takes_phases(geo, x.dtype):
            return scratch_bytes(col)
        phases = jit_phases.phase_shape(channels, rows, geo.kernel[0], geo.kernel[1], geo.out[1])
        return scratch_bytes(col, (phases, x.dtype))  # and a band's phases
    else:
        blocks = [((channels, *geo.kernel, _band_rows(geo, channels, x.dtype), *geo.out[1:]), x.dtype)]
    if geo.padded:
        blocks.append(((channels, *_padded_shape(x.shape, geo)), x.dtype))
    return scratch_bytes(*blocks)


def _images(x, geo: Geometry, padded: np.ndarray | None):
    """Each image of `x` as the windows read it: padded through the workspace when needed."""
    for n in range(x.shape[0]):
        if padded is None:
            yield n, x[n]
        else:
            pad_into(padded, x[n], geo, 0)
            yield n, padded


def _band_rows(geo: Geometry, channels: int, dtype) -> int:
    per_row = channels * math.prod(geo.kernel + geo.out[1:]) * np.dtype(dtype).itemsize
    rows = units_within(jit_conv.band_bytes(geo, channels, dtype), per_row, geo.out[0])
    return window.band_rows(rows, math.prod(geo.out[1:]), geo.out[0])


def _conv_im2col_compiled(x, w, b, out, geo: Geometry, group: int, scratch: Scratch, spec) -> None:
    """`_conv_im2col` with each band filled by `jit_conv.im2col_band` straight from the
    unpadded image, and the bias and activation `spec` applied to the band's output columns
    right after its matmul, while they are in cache."""
    channels, filters = x.shape[1], w.shape[0]
    rows = _band_rows(geo, channels, x.dtype)
    row_pixels = geo.out[1]
    col = scratch.take((channels * math.prod(geo.kernel) * rows * row_pixels,), x.dtype)
    phases = None
    if jit_conv.takes_phases(geo, x.dtype):  # a stride-2 window of many taps or wide rows: through phases
        phases = scratch.take(jit_phases.phase_shape(channels, rows, geo.kernel[0], geo.kernel[1], row_pixels), x.dtype)
    per_group = w.reshape(group, filters // group, -1)
    for n in range(x.shape[0]):
        image = out[n].reshape(filters, -1)
        target = image.reshape(group, filters // group, -1)
        for r in range(0, geo.out[0], rows):
            m = min(rows, geo.out[0] - r)
            band = col[: col.size // rows * m]
            if phases is None:
                jit_conv.im2col_into(x[n], band, r, m, geo)
            else:
                jit_phases.im2col_into(x[n], band, phases, r, m, geo)
            start, stop = r * row_pixels, (r + m) * row_pixels
            cols = band.reshape(group, -1, stop - start)
            for s, e in window.column_chunks(filters // group, cols.shape[1], start, stop):  # OpenBLAS's small kernel
                np.matmul(per_group, cols[:, :, s - start : e - start], out=target[:, :, s:e])
            jit_conv.epilogue(image, b, start, stop, spec)


def _conv_im2col(x, w, b, out, geo: Geometry, group: int, scratch: Scratch) -> None:
    channels, filters = x.shape[1], w.shape[0]
    rows = _band_rows(geo, channels, x.dtype)
    row_pixels = math.prod(geo.out[1:])
    band_shape = (channels, *geo.kernel, rows, *geo.out[1:])
    col = scratch.take((math.prod(band_shape),), x.dtype)
    padded = scratch.take((channels, *_padded_shape(x.shape, geo)), x.dtype) if geo.padded else None
    rank = len(geo.kernel)
    # windows() yields (C, *out, *kernel); the matmul wants (C, *kernel, *out).
    to_col = (0, *range(rank + 1, 2 * rank + 1), *range(1, rank + 1))
    per_group = w.reshape(group, filters // group, -1)
    lead = (slice(None),) * (1 + rank)
    for n, src in _images(x, geo, padded):
        win = windows(src, geo).transpose(to_col)
        target = out[n].reshape(group, filters // group, -1)
        for r in range(0, geo.out[0], rows):
            m = min(rows, geo.out[0] - r)
            band = col[: col.size // rows * m].reshape(channels, *geo.kernel, m, *geo.out[1:])
            np.copyto(band, win[(*lead, slice(r, r + m))])
            # The output band is a strided view with unit inner stride: BLAS writes it in place.
            target_band = target[:, :, r * row_pixels : (r + m) * row_pixels]
            np.matmul(per_group, band.reshape(group, -1, m * row_pixels), out=target_band)
    if b is not None:
        # One pass over the contiguous output: a band at a time would make numpy buffer the
        # strided operand (~80 KB outside the arena) for no measurable gain.
        out += b.reshape((filters,) + (1,) * len(geo.out))


def _taps_layout(x_shape, w_shape, dtype, geo: Geometry) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `_conv_taps`: per-tap weights, the padded image (one spare row, so
    the last tap's flat slice stays inside), and two bands of output rows over padded width."""
    channels, filters = x_shape[1], w_shape[0]
    height, width = _padded_shape(x_shape, geo)
    rows = _taps_band_rows(filters, width, geo.out[0], dtype)
    return [
        ((*geo.kernel, filters, channels), dtype),
        ((channels, height + 1, width), dtype),
        ((filters, rows * width), dtype),
        ((filters, rows * width), dtype),
    ]


def _taps_band_rows(filters: int, width: int, out_rows: int, dtype) -> int:
    return units_within(window.IM2COL_BLOCK_BYTES, filters * width * np.dtype(dtype).itemsize, out_rows)


def _conv_taps(x, w, b, out, geo: Geometry, scratch: Scratch) -> None:
    """Output row r, column c, over the padded width `width`, is flat position r * width + c,
    and tap (i, j) reads the padded image at that position plus i * dh * width + j * dw: per
    tap, a (filters, channels) @ (channels, rows * width) matmul on a plain view of the image,
    accumulated; the `width - out width` spare columns of each row are dropped at the end."""
    filters, channels = w.shape[:2]
    per_tap, padded, acc, part = (
        scratch.take(shape, dtype) for shape, dtype in _taps_layout(x.shape, w.shape, x.dtype, geo)
    )
    np.copyto(per_tap, w.transpose(2, 3, 0, 1))  # each tap's (filters, channels) contiguous for BLAS
    width = padded.shape[2]
    flat = padded.reshape(channels, -1)
    out_rows, out_cols = geo.out
    band = acc.shape[1] // width
    shifts = [(i * geo.dilations[0] * width + j * geo.dilations[1], (i, j)) for i, j in np.ndindex(*geo.kernel)]
    bias = None if b is None else b.reshape(filters, 1, 1)
    for n in range(x.shape[0]):
        pad_into(padded, x[n], geo, 0)
        for r in range(0, out_rows, band):
            m = min(band, out_rows - r)
            total, extra = acc[:, : m * width], part[:, : m * width]
            for k, (shift, tap) in enumerate(shifts):
                start = r * width + shift
                np.matmul(per_tap[tap], flat[:, start : start + m * width], out=total if k == 0 else extra)
                if k:
                    total += extra
            rows = total.reshape(filters, m, width)[:, :, :out_cols]
            if bias is None:
                np.copyto(out[n, :, r : r + m], rows)
            else:
                np.add(rows, bias, out=out[n, :, r : r + m])


# Depthwise im2col buffers cover this many bytes at most: channels are independent, so a
# block of them at a time gives the same result with a fraction of the workspace.
DEPTHWISE_BLOCK_BYTES = 1 << 20


def _depthwise_block(geo: Geometry, dtype) -> int:
    per_channel = math.prod(geo.kernel + geo.out) * np.dtype(dtype).itemsize
    return max(1, DEPTHWISE_BLOCK_BYTES // max(per_channel, 1))


def _conv_depthwise(x, w, b, out, geo: Geometry, scratch: Scratch) -> None:
    channels = x.shape[1]
    block = min(channels, _depthwise_block(geo, x.dtype))
    col = scratch.take((block, *geo.kernel, *geo.out), x.dtype)
    padded = scratch.take((channels, *_padded_shape(x.shape, geo)), x.dtype) if geo.padded else None
    rank = len(geo.kernel)
    to_col = (0, *range(rank + 1, 2 * rank + 1), *range(1, rank + 1))
    taps = math.prod(geo.kernel)
    pixels = math.prod(geo.out)
    for n, src in _images(x, geo, padded):
        win = windows(src, geo).transpose(to_col)
        for c in range(0, channels, block):
            m = min(block, channels - c)
            np.copyto(col[:m], win[c : c + m])
            target = out[n, c : c + m].reshape(m, 1, pixels)
            np.matmul(w[c : c + m].reshape(m, 1, taps), col[:m].reshape(m, taps, pixels), out=target)
            if b is not None:
                target += b[c : c + m].reshape(m, 1, 1)


def conv_prepare(inputs, outputs, *, group=1, **_) -> None:
    """Conv's prepare hook: its compiled loops (the dense bands', and the depthwise ones for a
    grouped conv) are compiled when a session prepares, never in a run nor when only planning."""
    jit_conv.warm()
    winograd.warm()
    jit_phases.warm()
    if group > 1:
        jit_depthwise.warm()


def conv_constants(values, inputs, outputs, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   pads=None, strides=None, **_) -> dict:  # fmt: skip
    """Conv's constants hook (`runtime.kernels.Kernel.constants`): a constant weight of a conv
    that runs by Winograd transformed once (``winograd_u``), not on every call."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    weight = values[1] if len(values) > 1 else None
    if weight is None or weight.dtype != jit_winograd.DTYPE or x is None or y is None:
        return {}
    geo, path = conv_route(x.shape, w.shape, y.shape, _attrs(auto_pad, dilations, group, kernel_shape, pads, strides))
    if path not in DENSE_ROUTES or not winograd.takes(geo, x.shape, w.shape, group, x.dtype):
        return {}
    return {"winograd_u": winograd.prepared_weights(weight, winograd.tile_of(geo, x.shape, w.shape))}


def conv_bind(inputs, outputs, attrs: dict, general) -> Bound | None:
    """Conv's bind hook: the pointwise and compiled depthwise routes bound once (`conv_bound`)."""
    return bind_conv(inputs, outputs, attrs, None, general)


@kernel(
    "Conv", workspace=conv_workspace, planes=CONV_PLANES, prepare=conv_prepare, constants=conv_constants, bind=conv_bind
)
@small_ufunc_buffers()
def conv(
    x, w, b=None, *, out, ws, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
    winograd_u=None, prepared_weights=True,
):  # fmt: skip
    attrs = _attrs(auto_pad, dilations, group, kernel_shape, pads, strides)
    convolve(x, w, b, out, ws, None, attrs, winograd_u, prepared_weights)


def _attrs(auto_pad, dilations, group, kernel_shape, pads, strides) -> dict:
    """A Conv's attributes as the dict `ConvGeometry.of` reads."""
    return {
        "auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape, "pads": pads,
        "strides": strides,
    }  # fmt: skip


Finish = Callable[[np.ndarray], None]


def convolve(x, w, b, out, ws, finish: Finish | None, attrs: dict, winograd_u=None, prepared=True) -> None:
    """Conv into `out` (`attrs` the Conv's attributes), then `finish` (an in-place activation, or None) over the output (with `winograd_u`
    the weight's Winograd transform made at prepare, or None; not `prepared`: no Winograd at all): each
    channel block while it is in cache on the banded depthwise route, each image elsewhere (a
    1x1 conv banded by output channels re-reads its input per band, which costs more than
    the cache saves)."""
    c = ConvGeometry.of(x.shape, w.shape, out.shape, attrs)
    (geo, path), group = c.route, c.group
    if np.may_share_memory(x, out):
        over = c.over
        if over == "columns":
            conv_columns(x, w, b, out, finish, Scratch(ws, "Conv"))
            return
        if (
            over == "rows"
            and winograd.applies(x, w, b, out, geo, group, winograd_u, prepared)
            and winograd.over_input(x, out)
        ):
            spec = jit_conv.spec_of(finish)
            scratch = Scratch(ws, "Conv")
            winograd.conv_winograd(x, w, b, out, geo, scratch, spec or jit_conv.NO_ACTIVATION, winograd_u, over=True)
            if spec is None and finish is not None:
                for n in range(x.shape[0]):
                    finish(out[n])
            return
        if over == "rows":
            conv_rows(x, w, b, out, geo, finish, Scratch(ws, "Conv"))
            return
    if path in DEPTHWISE_ROUTES and uses_compiled(geo, x.dtype):
        conv_depthwise_compiled(x, w, b, out, geo, Scratch(ws, "Conv"), finish)
        return
    batch, channels = x.shape[:2]
    filters = w.shape[0]
    if path == "pointwise":
        # W @ X per image and group, broadcast over both in one call: no copy of the input at all.
        pixels = math.prod(geo.out)
        np.matmul(
            w.reshape(group, filters // group, channels // group),
            x.reshape(batch, group, channels // group, pixels),
            out=out.reshape(batch, group, filters // group, pixels),
        )
        spec = jit_conv.spec_of(finish)
        if jit_conv.usable(out) and spec is not None:
            for n in range(batch):  # bias and activation in one compiled pass
                jit_conv.epilogue(out[n].reshape(filters, pixels), b, 0, pixels, spec)
            return
        if b is not None:
            out += b.reshape((filters,) + (1,) * len(geo.out))
    elif path == "rows":

        def epilogue(block: np.ndarray, bias: np.ndarray | None) -> None:
            add_bias(block, bias)
            if finish is not None:
                finish(block)

        conv_depthwise_rows(x, w, b, out, geo, Scratch(ws, "Conv"), epilogue)
        return
    elif path in DENSE_ROUTES and winograd.applies(x, w, b, out, geo, group, winograd_u, prepared):
        spec = jit_conv.spec_of(finish)
        winograd.conv_winograd(x, w, b, out, geo, Scratch(ws, "Conv"), spec or jit_conv.NO_ACTIVATION, winograd_u)
        if spec is not None:
            return
    elif path == "taps":
        _conv_taps(x, w, b, out, geo, Scratch(ws, "Conv"))
    elif path == "channels_last":
        conv_depthwise_channels_last(x, w, b, out, geo, Scratch(ws, "Conv"))
    elif path == "depthwise":
        _conv_depthwise(x, w, b, out, geo, Scratch(ws, "Conv"))
    elif jit_conv.takes_im2col(geo, x.dtype) and jit_conv.usable(x, out):
        spec = jit_conv.spec_of(finish)
        _conv_im2col_compiled(x, w, b, out, geo, group, Scratch(ws, "Conv"), spec or jit_conv.NO_ACTIVATION)
        if spec is not None:
            return
    else:
        _conv_im2col(x, w, b, out, geo, group, Scratch(ws, "Conv"))
    if finish is not None:
        for n in range(batch):
            finish(out[n])


def _int32(meta) -> TensorMeta:
    return TensorMeta(tuple(meta.shape), np.dtype(np.int32))


def conv_integer_workspace(inputs, outputs, **attrs) -> int:
    x, w = _int32(inputs[0]), _int32(inputs[1])
    widened = scratch_bytes((x.shape, x.dtype), (w.shape, w.dtype))
    return widened + conv_workspace([x, w], [_int32(outputs[0])], **attrs)


@kernel("ConvInteger", workspace=conv_integer_workspace)
def conv_integer(
    x, w, x_zero_point=None, w_zero_point=None, *, out, ws, auto_pad="NOTSET", dilations=None, group=1,
    kernel_shape=None, pads=None, strides=None,
):  # fmt: skip
    # Conv of (x - x_zero) and (w - w_zero) in int32. Removing the zero point first makes the
    # zero padding of the shifted input equal to padding x with its zero point, as the spec says.
    scratch = Scratch(ws, "ConvInteger")
    x32 = scratch.take(x.shape, np.int32)
    w32 = scratch.take(w.shape, np.int32)
    np.subtract(x, 0 if x_zero_point is None else x_zero_point.astype(np.int32), out=x32, dtype=np.int32)
    w_zero = 0 if w_zero_point is None else w_zero_point.astype(np.int32)
    if np.ndim(w_zero) == 1:
        w_zero = w_zero.reshape((-1,) + (1,) * (w.ndim - 1))  # one zero point per output channel
    np.subtract(w, w_zero, out=w32, dtype=np.int32)
    rest = None if ws is None else ws[scratch.used :]
    conv(x32, w32, None, out=out, ws=rest, auto_pad=auto_pad, dilations=dilations, group=group,
         kernel_shape=kernel_shape, pads=pads, strides=strides)  # fmt: skip
