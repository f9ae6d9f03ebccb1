"""Depthwise 2-D Conv as one BLAS matmul per channel: output rows against a banded weight matrix.

A depthwise filter (one k_h x k_w filter per channel) gives numpy nothing to batch across
channels, and im2col copies k_h * k_w values per output. Here the output's width is cut into
tiles of `tile` columns; a tile of one output row reads k_h input rows of
``span = stride * (tile - 1) + dilation * (k_w - 1) + 1`` columns, which are copied (k_h * span
values per `tile` outputs, about k_h values per output instead of k_h * k_w) into one row of a
(rows * tiles, k_h * span) matrix per channel. Its product with the channel's banded
(k_h * span, tile) matrix (the filter's taps on the diagonals, zeros elsewhere) is the tile:
BLAS does span / k_w times the multiply-adds a direct loop would, at many times numpy's
elementwise speed. The banded matrices are built in the workspace per call (a zero fill and
k_w strided copies), so the weights need no second copy beside the model's.

Worth it where the waste span / k_w is small beside the copy saved: 5x5 filters, strided
filters and narrow maps; a 3x3, stride-1 filter over a wide map stays on im2col (`uses_rows`).

Many channels over a small output map (the late stages of MobileNets and EfficientNets: 192 to
1152 channels, 7x7 or 14x14 outputs) run channels-last instead (`uses_channels_last`): the image
is copied once into a zero-padded (H, W, C) buffer, and one `einsum` over a strided view of
its windows multiplies and sums every tap, each inner loop a run of C contiguous values, into
an (H_out, W_out, C) buffer that is copied back to channels-first. The banded rows would make
one tiny matmul per channel there, and their banded matrices cost as much again.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from runtime.kernels import jit_activation
from runtime.kernels._scratch import Scratch, units_within
from runtime.kernels.conv import jit_depthwise
from runtime.kernels.window import Geometry, pad_into, padded_extent

# Output tile widths tried in this order: the first that divides the output width is taken
# (14 measured best on MobileNet/EfficientNet maps; 7, 8 and 16 close behind).
TILES = (14, 12, 16, 10, 8, 7, 18, 20, 9, 11, 13, 15, 6, 5)
# Widest output a tile may cover alone when no tile in `TILES` divides it.
LONE_TILE = 24
# Bytes of copied rows per channel block: the banded product streams this much through cache.
ROWS_BLOCK_BYTES = 1 << 20


def tile_width(out_width: int) -> int | None:
    """Output columns per tile, or None when the width has no fitting tile."""
    for t in TILES:
        if out_width % t == 0:
            return t
    return out_width if out_width <= LONE_TILE else None


def uses_rows(geo: Geometry) -> bool:
    """A 2-D depthwise conv this module runs faster than im2col (measured per shape class)."""
    if len(geo.kernel) != 2 or tile_width(geo.out[1]) is None:
        return False
    wide_3x3 = geo.strides == (1, 1) and geo.kernel[1] <= 3 and geo.out[1] > 28
    return not wide_3x3


# A depthwise conv runs channels-last from this many channels when its output has at most this
# many pixels (measured against the banded rows: 1.3x to 3x faster on such shapes, slower with
# fewer channels or larger maps, where the (H, W, C) rows are too short or too many).
CHANNELS_LAST_MIN_CHANNELS = 192
CHANNELS_LAST_MAX_PIXELS = 196


def uses_channels_last(geo: Geometry, channels: int) -> bool:
    """A 2-D depthwise conv this module runs channels-last (`conv_depthwise_channels_last`)."""
    return (
        len(geo.kernel) == 2
        and channels >= CHANNELS_LAST_MIN_CHANNELS
        and math.prod(geo.out) <= CHANNELS_LAST_MAX_PIXELS
    )


def channels_last_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_depthwise_channels_last`: the padded image, the output and the
    taps, each channels-last."""
    dtype, channels = np.dtype(dtype), x_shape[1]
    return [
        ((*padded_extent(x_shape[2:], geo), channels), dtype),
        ((*geo.out, channels), dtype),
        ((*geo.kernel, channels), dtype),
    ]


def conv_depthwise_channels_last(x, w, b, out, geo: Geometry, scratch: Scratch) -> None:
    """`out` = depthwise Conv(x, w) + b, through channels-last copies in the workspace. Each
    image is read whole into the padded buffer before its output is written, so `out` may be
    the image's own memory (`runtime.kernels.planes`, direct)."""
    (padded_shape, dtype), (acc_shape, _), (taps_shape, _) = channels_last_layout(x.shape, geo, x.dtype)
    padded, acc, taps = (
        scratch.take(padded_shape, dtype),
        scratch.take(acc_shape, dtype),
        scratch.take(taps_shape, dtype),
    )
    np.copyto(taps, w[:, 0].transpose(1, 2, 0))
    (top, left), (height, width) = geo.begin, x.shape[2:]
    # The pads only: the interior is overwritten by each image.
    padded[:top] = 0
    padded[top + height :] = 0
    padded[top : top + height, :left] = 0
    padded[top : top + height, left + width :] = 0
    s0, s1, s2 = padded.strides
    strides = (geo.strides[0] * s0, geo.strides[1] * s1, geo.dilations[0] * s0, geo.dilations[1] * s1, s2)
    windows = np.lib.stride_tricks.as_strided(padded, (*geo.out, *geo.kernel, x.shape[1]), strides, writeable=False)
    for n in range(x.shape[0]):
        np.copyto(padded[top : top + height, left : left + width], x[n].transpose(1, 2, 0))
        np.einsum("hwijc,ijc->hwc", windows, taps, out=acc)
        if b is not None:
            acc += b
        np.copyto(out[n], acc.transpose(2, 0, 1))


def _span(geo: Geometry, tile: int) -> int:
    return geo.strides[1] * (tile - 1) + geo.dilations[1] * (geo.kernel[1] - 1) + 1


def _block(channels: int, geo: Geometry, dtype: np.dtype) -> int:
    tile = tile_width(geo.out[1]) or 1
    per_channel = geo.out[0] * geo.out[1] // tile * geo.kernel[0] * _span(geo, tile) * dtype.itemsize
    return units_within(ROWS_BLOCK_BYTES, per_channel, channels)


def rows_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_depthwise_rows`: a channel block's padded planes, its copied
    rows and its banded matrices."""
    dtype = np.dtype(dtype)
    tile = tile_width(geo.out[1])
    assert tile is not None
    block = _block(x_shape[1], geo, dtype)
    span = _span(geo, tile)
    rows, tiles = geo.out[0], geo.out[1] // tile
    depth = geo.kernel[0] * span
    return [
        ((block, *padded_extent(x_shape[2:], geo)), dtype),
        ((block, rows * tiles, depth), dtype),
        ((block, depth, tile), dtype),
    ]


def _banded(bands: np.ndarray, w: np.ndarray, geo: Geometry, tile: int, span: int) -> None:
    """bands[c, i * span + stride * j + dilation * jj, j] = w[c, 0, i, jj]; zeros elsewhere."""
    bands.fill(0)
    m, depth, _ = bands.shape
    size = bands.itemsize
    for jj in range(geo.kernel[1]):
        # Entry (c, i, j) of tap jj: one strided view, the diagonal stepping stride * tile + 1.
        start = geo.dilations[1] * jj * tile * size
        strides = (depth * tile * size, span * tile * size, (geo.strides[1] * tile + 1) * size)
        taps = np.ndarray((m, geo.kernel[0], tile), bands.dtype, bands, start, strides)
        taps[...] = w[:m, 0, :, jj, None]


Epilogue = Callable[[np.ndarray, np.ndarray | None], None]


def add_bias(target: np.ndarray, bias: np.ndarray | None) -> None:
    """The plain epilogue: the bias per channel (axis 0 of `target`)."""
    if bias is not None:
        target += bias.reshape((-1,) + (1,) * (target.ndim - 1))


def conv_depthwise_rows(x, w, b, out, geo: Geometry, scratch: Scratch, epilogue: Epilogue = add_bias) -> None:
    """`out` = depthwise Conv(x, w) with `epilogue(block, bias)` run on each channel block
    of the output while it is still in cache (bias, and an activation when fused)."""
    channels = x.shape[1]
    tile = tile_width(geo.out[1])
    assert tile is not None
    span = _span(geo, tile)
    (block_shape, dtype), (rows_shape, _), (bands_shape, _) = rows_layout(x.shape, geo, x.dtype)
    padded = scratch.take(block_shape, dtype)
    copied = scratch.take(rows_shape, dtype)
    bands = scratch.take(bands_shape, dtype)
    block = block_shape[0]
    rows, tiles = geo.out[0], geo.out[1] // tile
    s0, s1, s2 = padded.strides
    view_shape = (rows, tiles, geo.kernel[0], span)
    view_strides = (s0, geo.strides[0] * s1, geo.strides[1] * tile * s2, geo.dilations[0] * s1, s2)
    for c in range(0, channels, block):
        m = min(block, channels - c)
        _banded(bands[:m], w[c : c + m], geo, tile, span)
        for n in range(x.shape[0]):
            pad_into(padded[:m], x[n, c : c + m], geo, 0)
            source = np.ndarray((m, *view_shape), dtype, padded, 0, view_strides)
            np.copyto(copied[:m].reshape(m, *view_shape), source)
            target = out[n, c : c + m].reshape(m, rows * tiles, tile)
            np.matmul(copied[:m], bands[:m], out=target)
            epilogue(out[n, c : c + m], None if b is None else b[c : c + m])


# Outputs narrower than CHANNELS_LAST_BELOW run the compiled loop channels-last
# (`jit_channels_last`), and so do outputs up to CHANNELS_LAST_UP_TO wide from
# CHANNELS_LAST_FROM channels; the others run over sub-planes (`jit_depthwise.depthwise`).
# Measured per layer of MobileNetV2/V3 and EfficientNet-B0, alternating in one process: on the
# 14-wide outputs of 192 to 672 channels channels-last takes 0.72x to 0.96x the time of the
# sub-planes (their 14-value rows cost more to copy in and out than the transposes, done in
# registers), on 120 channels 1.17x, on 28-wide outputs 1.1x to 1.6x.
CHANNELS_LAST_BELOW = 14
CHANNELS_LAST_UP_TO = 14
CHANNELS_LAST_FROM = 192
# An output of one row (a tiled stage's band) runs channels-last from ONE_ROW_FROM channels: the
# sub-planes' set-up per channel outweighs its one row of sums (figures: docs/BENCHMARKS.md,
# "Figures behind the code").
ONE_ROW_FROM = 128


def compiled_channels_last(channels: int, geo: Geometry) -> bool:
    """Whether the compiled depthwise conv runs channels-last (else over sub-planes)."""
    width = geo.out[1]
    if geo.out[0] == 1 and channels >= ONE_ROW_FROM:
        return True
    return width < CHANNELS_LAST_BELOW or (width <= CHANNELS_LAST_UP_TO and channels >= CHANNELS_LAST_FROM)


def uses_compiled(geo: Geometry, dtype) -> bool:
    """A depthwise conv the compiled loops (`runtime.kernels.conv.jit_depthwise`) run: float32, 2-D."""
    return jit_depthwise.uses_compiled(geo, dtype)


@functools.lru_cache(maxsize=1024)
def compiled_layout(x_shape, geo: Geometry, dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks of `conv_depthwise_compiled` (cached: a model asks the same few shapes
    every run)."""
    if compiled_channels_last(x_shape[1], geo):
        return jit_depthwise.channels_last_layout(tuple(x_shape), geo, np.dtype(dtype))
    return jit_depthwise.compiled_layout(tuple(x_shape), geo, np.dtype(dtype))


NO_ACTIVATION = jit_activation.spec("")


def conv_depthwise_compiled(x, w, b, out, geo: Geometry, scratch: Scratch, finish: Callable | None) -> None:
    """`out` = finish(depthwise Conv(x, w) + b) through the compiled loops: an activation that
    carries its `spec` (`_epilogue.Finish`) runs inside the loop, any other `finish` after it
    over each image. Reads each channel's plane (channels-last: the whole image) before
    writing its output (`direct`)."""
    spec = getattr(finish, "spec", None) if finish is not None else NO_ACTIVATION
    loop, arguments = compiled_call(x, w, b, out, geo, scratch, spec or NO_ACTIVATION)
    loop(*arguments)
    if finish is not None and spec is None:
        for n in range(x.shape[0]):
            finish(out[n])


def compiled_call(
    x, w, b, out, geo: Geometry, scratch: Scratch, act: tuple[int, float, float]
) -> tuple[Callable, tuple]:
    """(compiled loop, its arguments) computing `out` = act(depthwise Conv(x, w) + b), the
    scratch blocks taken from `scratch`: a bound call makes this once per set of arrays."""
    blocks = [scratch.take(shape, dtype) for shape, dtype in compiled_layout(x.shape, geo, x.dtype)]
    if compiled_channels_last(x.shape[1], geo):
        image, taps, rows = blocks
        return jit_depthwise.channels_last_call(x, w, b, out, geo, image, taps, rows, act)
    subs, acc = blocks
    return jit_depthwise.depthwise_call(x, w, b, out, geo, subs, acc, act)
