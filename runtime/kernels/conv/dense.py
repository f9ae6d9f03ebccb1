"""The dense and numpy depthwise loops of Conv's routes (`runtime.kernels.conv.routes` lists the
routes; `runtime.kernels.conv.conv` is the kernel): im2col in bands of output rows (numpy, or compiled
straight from the unpadded image), one matmul per kernel tap, and depthwise im2col by channel
blocks. Each loop takes its scratch from the workspace by the layout its route declares.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import window
from runtime.kernels._scratch import Scratch, scratch_bytes, units_within
from runtime.kernels.conv import jit_conv, jit_phases
from runtime.kernels.window import Geometry, pad_into, windows


def padded_shape(x_shape: tuple[int, ...], geo: Geometry) -> tuple[int, ...]:
    return tuple(i + b + e for i, b, e in zip(x_shape[2:], geo.begin, geo.end, strict=True))


def images(x, geo: Geometry, padded: np.ndarray | None):
    """Each image of `x` as the windows read it: padded through the workspace when needed."""
    for n in range(x.shape[0]):
        if padded is None:
            yield n, x[n]
        else:
            pad_into(padded, x[n], geo, 0)
            yield n, padded


def band_rows(geo: Geometry, channels: int, dtype) -> int:
    per_row = channels * math.prod(geo.kernel + geo.out[1:]) * np.dtype(dtype).itemsize
    rows = units_within(jit_conv.band_bytes(geo, channels, dtype), per_row, geo.out[0])
    return window.band_rows(rows, math.prod(geo.out[1:]), geo.out[0])


def conv_im2col_compiled(x, w, b, out, geo: Geometry, group: int, scratch: Scratch, spec) -> None:
    """`conv_im2col` with each band filled by `jit_conv.im2col_band` straight from the
    unpadded image, and the bias and activation `spec` applied to the band's output columns
    right after its matmul, while they are in cache."""
    channels, filters = x.shape[1], w.shape[0]
    rows = band_rows(geo, channels, x.dtype)
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


def conv_im2col(x, w, b, out, geo: Geometry, group: int, scratch: Scratch) -> None:
    channels, filters = x.shape[1], w.shape[0]
    rows = band_rows(geo, channels, x.dtype)
    row_pixels = math.prod(geo.out[1:])
    band_shape = (channels, *geo.kernel, rows, *geo.out[1:])
    col = scratch.take((math.prod(band_shape),), x.dtype)
    padded = scratch.take((channels, *padded_shape(x.shape, geo)), x.dtype) if geo.padded else None
    rank = len(geo.kernel)
    # windows() yields (C, *out, *kernel); the matmul wants (C, *kernel, *out).
    to_col = (0, *range(rank + 1, 2 * rank + 1), *range(1, rank + 1))
    per_group = w.reshape(group, filters // group, -1)
    lead = (slice(None),) * (1 + rank)
    for n, src in images(x, geo, padded):
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


def taps_layout(x_shape, w_shape, dtype, geo: Geometry) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_taps`: per-tap weights, the padded image (one spare row, so
    the last tap's flat slice stays inside), and two bands of output rows over padded width."""
    channels, filters = x_shape[1], w_shape[0]
    height, width = padded_shape(x_shape, geo)
    rows = taps_band_rows(filters, width, geo.out[0], dtype)
    return [
        ((*geo.kernel, filters, channels), dtype),
        ((channels, height + 1, width), dtype),
        ((filters, rows * width), dtype),
        ((filters, rows * width), dtype),
    ]


def taps_band_rows(filters: int, width: int, out_rows: int, dtype) -> int:
    return units_within(window.IM2COL_BLOCK_BYTES, filters * width * np.dtype(dtype).itemsize, out_rows)


def conv_taps(x, w, b, out, geo: Geometry, scratch: Scratch) -> None:
    """Output row r, column c, over the padded width `width`, is flat position r * width + c,
    and tap (i, j) reads the padded image at that position plus i * dh * width + j * dw: per
    tap, a (filters, channels) @ (channels, rows * width) matmul on a plain view of the image,
    accumulated; the `width - out width` spare columns of each row are dropped at the end."""
    filters, channels = w.shape[:2]
    per_tap, padded, acc, part = (
        scratch.take(shape, dtype) for shape, dtype in taps_layout(x.shape, w.shape, x.dtype, geo)
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


def depthwise_block(geo: Geometry, dtype) -> int:
    per_channel = math.prod(geo.kernel + geo.out) * np.dtype(dtype).itemsize
    return max(1, DEPTHWISE_BLOCK_BYTES // max(per_channel, 1))


def conv_depthwise_taps(x, w, b, out, geo: Geometry, scratch: Scratch) -> None:
    channels = x.shape[1]
    block = min(channels, depthwise_block(geo, x.dtype))
    col = scratch.take((block, *geo.kernel, *geo.out), x.dtype)
    padded = scratch.take((channels, *padded_shape(x.shape, geo)), x.dtype) if geo.padded else None
    rank = len(geo.kernel)
    to_col = (0, *range(rank + 1, 2 * rank + 1), *range(1, rank + 1))
    taps = math.prod(geo.kernel)
    pixels = math.prod(geo.out)
    for n, src in images(x, geo, padded):
        win = windows(src, geo).transpose(to_col)
        for c in range(0, channels, block):
            m = min(block, channels - c)
            np.copyto(col[:m], win[c : c + m])
            target = out[n, c : c + m].reshape(m, 1, pixels)
            np.matmul(w[c : c + m].reshape(m, 1, taps), col[:m].reshape(m, taps, pixels), out=target)
            if b is not None:
                target += b[c : c + m].reshape(m, 1, 1)


def im2col_workspace(x_shape, dtype, geo: Geometry) -> int:
    """Workspace of `conv_im2col_compiled` where it applies (`jit_conv.takes_im2col`), else of `conv_im2col`."""
    channels = x_shape[1]
    rows = band_rows(geo, channels, dtype)
    col = ((channels, *geo.kernel, rows, *geo.out[1:]), dtype)
    if jit_conv.takes_im2col(geo, dtype):
        if not jit_conv.takes_phases(geo, dtype):
            return scratch_bytes(col)
        return scratch_bytes(
            col, (jit_phases.phase_shape(channels, rows, geo.kernel[0], geo.kernel[1], geo.out[1]), dtype)
        )
    return scratch_bytes(col, *([((channels, *padded_shape(x_shape, geo)), dtype)] if geo.padded else []))


def depthwise_taps_workspace(x_shape, dtype, geo: Geometry) -> int:
    """Workspace of `conv_depthwise_taps`: a block of channels' im2col and the padded image."""
    blocks = [((min(x_shape[1], depthwise_block(geo, dtype)), *geo.kernel, *geo.out), dtype)]
    if geo.padded:
        blocks.append(((x_shape[1], *padded_shape(x_shape, geo)), dtype))
    return scratch_bytes(*blocks)


def conv_pointwise(x, w, b, out, geo: Geometry, group: int, finish) -> bool:
    """A 1x1, stride-1, unpadded conv: W @ X per image and group, broadcast over both in one call
    (no copy of the input at all), then the bias and `finish` in one compiled pass where it
    carries its code. Whether `finish` was applied."""
    batch, channels = x.shape[:2]
    filters = w.shape[0]
    pixels = math.prod(geo.out)
    np.matmul(
        w.reshape(group, filters // group, channels // group),
        x.reshape(batch, group, channels // group, pixels),
        out=out.reshape(batch, group, filters // group, pixels),
    )
    spec = jit_conv.spec_of(finish)
    if jit_conv.usable(out) and spec is not None:
        for n in range(batch):
            jit_conv.epilogue(out[n].reshape(filters, pixels), b, 0, pixels, spec)
        return True
    if b is not None:
        out += b.reshape((filters,) + (1,) * len(geo.out))
    return False
