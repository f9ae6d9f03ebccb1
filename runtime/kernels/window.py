"""Sliding-window geometry shared by Conv, ConvTranspose, the pools and their gradients.

`window_geometry` turns ONNX's kernel_shape, pads, auto_pad, strides and dilations into
per-axis numbers, taking output sizes from the output tensor (so ceil_mode needs no rule of
its own); `windows` is a copy-free strided view of every window; `pad_into` copies an image
into a padded buffer; `padded_extent` is how large that buffer must be for every window to fit.
(ONNX's reference evaluator keeps the same maths in `_op_common_window.py`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# An im2col (Conv) or column (ConvTranspose) buffer holds this many bytes at most: a large conv
# fills and multiplies it one band of rows at a time, which bounds the workspace and keeps the
# band in cache. Read as `window.IM2COL_BLOCK_BYTES` at run time, so that tests can shrink it.
IM2COL_BLOCK_BYTES = 1 << 20
# A dense Conv's band spans at least this many output pixels whatever its bytes: OpenBLAS's
# sgemm runs 10 to 15% slower on 80 columns than on 160 or more (measured single-threaded on
# a CRNN's 512-channel 80-wide rows). Read at run time as IM2COL_BLOCK_BYTES.
MIN_BAND_PIXELS = 160
# OpenBLAS multiplies without packing (its small-matrix kernel) up to M * N * K = 100^3 (its
# SkylakeX builds): a matmul of few rows and a short depth over many columns runs faster in
# column chunks within that (MobileNetV2's 1x1 conv 32 -> 16 at 112 x 112: 190 -> 149 us with
# its epilogue). Chunks narrower than MIN_COLUMNS lose more in calls than they gain (576 -> 96
# at 14 x 14: 229 -> 300 us in 16-column chunks).
SMALL_GEMM = 100**3
MIN_COLUMNS = 256
# Likewise many rows of a short product (a 1x1 conv's filters on a 7 x 7 map: 1280 x 320 by 49
# columns 637 -> 556 us from memory) in row chunks of at least MIN_ROWS; fewer rows a call
# (a depth of 960 or more) lose (192 x 1152 by 49: 350 -> 366 us).
MIN_ROWS = 32
# `pad_into` fills a whole padded buffer, then copies the image in, when its rows are shorter
# than this; longer rows get only their border slabs filled.
NARROW_ROWS = 100


@dataclass(frozen=True)
class Geometry:
    """Per spatial axis: kernel size, stride, dilation, pads before and after, output size."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """Span of one window in input elements (a dilated kernel's size)."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))

    @property
    def padded(self) -> bool:
        return any(self.begin) or any(self.end)


def small_columns(rows: int, depth: int, columns: int) -> int:
    """Columns per matmul of a (rows, depth) @ (depth, columns) product: within `SMALL_GEMM`
    (a multiple of 16) when that leaves at least `MIN_COLUMNS`, else all of them."""
    width = SMALL_GEMM // max(1, rows * depth) // 16 * 16
    return width if MIN_COLUMNS <= width < columns else columns


def small_rows(rows: int, depth: int, columns: int) -> int:
    """Rows per matmul of a (rows, depth) @ (depth, columns) product: within `SMALL_GEMM` when
    that leaves at least `MIN_ROWS`, else all of them."""
    height = SMALL_GEMM // max(1, depth * columns)
    return height if MIN_ROWS <= height < rows else rows


def column_chunks(rows: int, depth: int, start: int, stop: int) -> list[tuple[int, int]]:
    """Columns [start, stop) of such a product as `small_columns` chunks, (start, stop) each."""
    width = small_columns(rows, depth, stop - start)
    return [(s, min(stop, s + width)) for s in range(start, stop, width)]


def band_rows(budget_rows: int, row_pixels: int, total: int) -> int:
    """Output rows of a dense Conv's band: `budget_rows` (what IM2COL_BLOCK_BYTES allows), raised to
    span `MIN_BAND_PIXELS`, at most `total`, then evened out over the bands that takes (14 rows
    by 12 would leave a last band of 2, whose matmul runs slowly: 7 and 7 instead)."""
    if total <= 0:
        return 0  # a map of no rows: no band
    rows = min(total, max(budget_rows, -(-MIN_BAND_PIXELS // max(1, row_pixels))))
    bands = -(-total // rows)
    return -(-total // bands)


def spatial_geometry(
    in_spatial: tuple[int, ...],
    out_spatial: tuple[int, ...],
    kernel_shape: Sequence[int],
    auto_pad: str = "NOTSET",
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> Geometry:
    """Geometry of a sliding-window op (Conv, pooling) whose output sizes are already known.

    SAME_UPPER/SAME_LOWER pad so that the output covers the input (extra pad after / before);
    VALID pads nothing; NOTSET uses `pads` ([x1_begin, x2_begin, ..., x1_end, x2_end, ...]).
    """
    rank = len(in_spatial)
    kernel = tuple(int(k) for k in kernel_shape)
    steps = tuple(int(s) for s in strides) if strides else (1,) * rank
    spread = tuple(int(d) for d in dilations) if dilations else (1,) * rank
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (o - 1) * s + (k - 1) * d + 1 - i)
            for i, o, k, s, d in zip(in_spatial, out_spatial, kernel, steps, spread, strict=True)
        ]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID" or not pads:
        begin, end = [0] * rank, [0] * rank
    elif auto_pad == "NOTSET":
        begin, end = list(pads[:rank]), list(pads[rank:])
    else:
        raise ValueError(f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    return Geometry(kernel, steps, spread, tuple(begin), tuple(end), tuple(out_spatial))


def windows(src: np.ndarray, geo: Geometry) -> np.ndarray:
    """Strided view ``(*lead, *out, *kernel)`` of every window of `src` (``(*lead, *spatial)``,
    already padded): no copy is made."""
    rank = len(geo.kernel)
    lead = src.ndim - rank
    need = [(o - 1) * s + e for o, s, e in zip(geo.out, geo.strides, geo.extent, strict=True)]
    if any(n > length for n, length in zip(need, src.shape[lead:], strict=True)):
        raise ValueError(f"windows of extent {geo.extent} need spatial sizes {need}, got {src.shape[lead:]}")
    steps = src.strides[lead:]
    shape = (*src.shape[:lead], *geo.out, *geo.kernel)
    strides = (
        *src.strides[:lead],
        *(t * s for t, s in zip(steps, geo.strides, strict=True)),
        *(t * d for t, d in zip(steps, geo.dilations, strict=True)),
    )
    if src.flags.c_contiguous:
        # A view over src's buffer: a tenth of as_strided's cost, which small convs feel.
        return np.ndarray(shape, src.dtype, src, 0, strides)
    return np.lib.stride_tricks.as_strided(src, shape, strides, writeable=False)


def pad_into(dst: np.ndarray, x: np.ndarray, geo: Geometry, fill: float) -> None:
    """Copy `x` (``(*lead, *spatial)``) into `dst` with `geo`'s pads filled with `fill`.
    `dst` may be longer than needed at the end of an axis (ceil-mode pooling): that tail is filled too."""
    rank = len(geo.kernel)
    lead = x.ndim - rank
    inner = (slice(None),) * lead + tuple(slice(b, b + n) for b, n in zip(geo.begin, x.shape[lead:], strict=True))
    if x.shape[-1] < NARROW_ROWS and dst.flags.c_contiguous:
        # Short rows: the border columns are slabs of one or two elements per row, which numpy
        # fills slower than it sets the whole buffer (two to three times, measured on 7x7 to
        # 56x56 maps).
        dst.fill(fill)
        dst[inner] = x
        return
    # Fill only the border slabs: the interior is overwritten by the copy below.
    for axis in range(rank):
        b = geo.begin[axis]
        n = x.shape[lead + axis]
        before = (slice(None),) * (lead + axis) + (slice(0, b),)
        after = (slice(None),) * (lead + axis) + (slice(b + n, None),)
        dst[before] = fill
        dst[after] = fill
    dst[inner] = x


def window_geometry(
    x_shape: Sequence[int],
    y_shape: Sequence[int],
    kernel_shape: Sequence[int],
    auto_pad: str = "NOTSET",
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> Geometry:
    """`spatial_geometry` of an (N, C, *spatial) input and output."""
    return spatial_geometry(tuple(x_shape[2:]), tuple(y_shape[2:]), kernel_shape, auto_pad, pads, strides, dilations)


def padded_extent(x_spatial: Sequence[int], geo: Geometry) -> tuple[int, ...]:
    """Per axis, the length of a padded image that holds the leading pads, the input, and every
    window (the trailing pads and ceil_mode's overhang only as far as a window reaches)."""
    need = [(o - 1) * s + e for o, s, e in zip(geo.out, geo.strides, geo.extent, strict=True)]
    return tuple(max(n, b + i) for n, b, i in zip(need, geo.begin, x_spatial, strict=True))
