"""Dense 3x3 stride-1 Conv by Winograd's F(2x2, 3x3): 16 matmuls of (K, C) @ (C, tiles).

The transforms are `runtime.kernels.jit_winograd`'s compiled loops. Per image, the output's
2x2 tiles go in bands of tile rows sized so that a band's transformed input V (16, C, tiles)
and product M (16, K, tiles) stay within `window.IM2COL_BLOCK_BYTES` (cache); per band:

1. `jit_winograd.inputs` writes V from the unpadded image (pads read as zeros);
2. ``np.matmul(U, V, out=M)``: 16 BLAS sgemms, U (16, K, C) the transformed weights;
3. `jit_winograd.outputs` writes A^T M A into the band's output rows, then
   `jit_conv.epilogue` adds bias and activation to those rows while they are in cache.

U is transformed into the workspace on each call (a weight may change between runs: training,
shared parameters); `prepared_weights` makes one ahead for a caller that knows its weight
constant. 2.25x fewer multiplications than im2col, at the price of the three
transforms: it wins on large maps only, so `takes` keeps it to those (measured, see
docs/BENCHMARKS.md "winograd notes").
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import jit_conv, jit_winograd, window
from runtime.kernels._scratch import Scratch, units_within
from runtime.kernels.window import Geometry

# Output pixels per image below which im2col's single sgemm beats the transforms (measured
# single-threaded on ResNet's layers, weights transformed per call: 64 channels at 56x56
# 2.0 ms against im2col's 2.9, 128 at 28x28 1.7 against 2.7, 256 at 14x14 2.0 against 2.7;
# 512 at 7x7 loses, 5.1 against 3.2: 16 tiles make 16 thin sgemms).
MIN_PIXELS = 14 * 14
# Input channels below which im2col wins: each of the 16 matmuls is then only that deep
# (crnn_ocr's first conv, 3 channels to 64 over 48 x 320: 1.75 ms against im2col's 1.20;
# 16 channels to 32 over the same map: 1.87 against 2.13).
MIN_CHANNELS = 16
POSITIONS = jit_winograd.ALPHA * jit_winograd.ALPHA
# Transformed weights (16 K C floats) up to this size are made per call in the workspace (any
# weight); larger ones only at prepare, for a constant weight (`prepared_weights`): 512 by 512
# channels would add 16 MB to the arena (crnn_ocr's 6.8 -> 23.5 MB) for a per-call transform.
WEIGHTS_PER_CALL_BYTES = 2 << 20
# Transformed weights up to this size leave room in cache for bands twice as large (`_band_tile_rows`).
U_IN_CACHE_BYTES = 1 << 20


def takes(geo: Geometry, x_shape, w_shape, group: int, dtype) -> bool:
    """Whether a Conv of this geometry runs by Winograd: compiled loops on, float32, 2-D 3x3,
    stride 1, dilation 1, ungrouped, on a map of at least `MIN_PIXELS` output pixels from at
    least `MIN_CHANNELS` channels."""
    return (
        jit_winograd.inputs is not None
        and np.dtype(dtype) == jit_winograd.DTYPE
        and group == 1
        and geo.kernel == (3, 3)
        and geo.strides == (1, 1)
        and geo.dilations == (1, 1)
        and len(x_shape) == 4
        and math.prod(geo.out) >= MIN_PIXELS
        and x_shape[1] >= MIN_CHANNELS
    )


def _tiles(geo: Geometry) -> tuple[int, int]:
    tile = jit_winograd.TILE
    return -(-geo.out[0] // tile), -(-geo.out[1] // tile)


def _band_tile_rows(x_shape, w_shape, geo: Geometry) -> int:
    tiles_h, tiles_w = _tiles(geo)
    per_row = POSITIONS * (x_shape[1] + w_shape[0]) * tiles_w * jit_winograd.DTYPE.itemsize
    # V and M within im2col's budget while U fits in cache beside them (ResNet's 64 channels at
    # 56 x 56: 1.62 -> 1.47 ms, 128 at 28 x 28: 1.61 -> 1.52), else half of it (256 channels
    # at 14 x 14, U 4 MB: 1.53 ms against 1.93).
    u_bytes = POSITIONS * x_shape[1] * w_shape[0] * jit_winograd.DTYPE.itemsize
    budget = window.IM2COL_BLOCK_BYTES if u_bytes <= U_IN_CACHE_BYTES else window.IM2COL_BLOCK_BYTES // 2
    return units_within(budget, per_row, tiles_h)


def _stride(elements: int) -> int:
    """Elements from one of the 16 planes of U, V or M to the next: at least `elements`, and
    320 bytes past a multiple of 4 KB, so that the loops' 16 streams (one per plane) fall in
    different cache sets (at a multiple of 4 KB, 64 channels by 4 rows of 28 tiles, they all
    share one set and the input transform ran 4.5x slower)."""
    return -(-elements // 1024) * 1024 + 80


def _planes(flat: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The (16, rows, cols) view of `flat` with planes `_stride(rows * cols)` apart."""
    stride = _stride(rows * cols)
    return flat[: POSITIONS * stride].reshape(POSITIONS, stride)[:, : rows * cols].reshape(POSITIONS, rows, cols)


def _saved_rows(geo: Geometry) -> int:
    """Input rows a band over its image overwrites before the next band reads them: its top pad."""
    return max(0, min(2, geo.begin[0]))


def per_call(w_shape) -> bool:
    """Whether a weight of this shape may be transformed per call (into the workspace)."""
    return POSITIONS * w_shape[0] * w_shape[1] * jit_winograd.DTYPE.itemsize <= WEIGHTS_PER_CALL_BYTES


def layout(x_shape, w_shape, geo: Geometry, with_weights: bool | None = None) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Workspace blocks: U (when made per call: by default as `per_call` says), a zero row,
    the rows saved aside when over the input, then a band's V and M."""
    if with_weights is None:
        with_weights = per_call(w_shape)
    channels, filters = x_shape[1], w_shape[0]
    band = _band_tile_rows(x_shape, w_shape, geo) * _tiles(geo)[1]
    dtype: np.dtype = jit_winograd.DTYPE
    # the row a tile reads above or below the image, then the transforms' scratch
    zeros: tuple[tuple[int, ...], np.dtype] = (
        (x_shape[3] + jit_winograd.scratch_elements(_tiles(geo)[1], band),),
        dtype,
    )
    saved = ((_saved_rows(geo), channels, x_shape[3]), dtype)  # rows an output over the image overwrote
    blocks: list[tuple[tuple[int, ...], np.dtype]] = [
        zeros,
        saved,
        ((POSITIONS * _stride(channels * band),), dtype),
        ((POSITIONS * _stride(filters * band),), dtype),
    ]
    return ([((POSITIONS * _stride(filters * channels),), dtype)] if with_weights else []) + blocks


def prepared_weights(w: np.ndarray) -> np.ndarray:
    """U (16, K, C) of a constant weight, made once (at prepare) instead of per call."""
    assert jit_winograd.weights is not None
    u = _planes(np.empty(POSITIONS * _stride(w.shape[0] * w.shape[1]), jit_winograd.DTYPE), w.shape[0], w.shape[1])
    jit_winograd.weights(np.ascontiguousarray(w, dtype=jit_winograd.DTYPE), u)
    return u


def over_input(x: np.ndarray, out: np.ndarray) -> bool:
    """Whether `conv_winograd` may run with `out` over `x`: same map size and first byte, and
    one image or as many filters as channels, so that output row y of filter k lands on input
    row y of channel k of the same image (or past the image): a band's output rows overwrite
    only input rows of that band and the rows above it, which the next band reads from the
    workspace (`over=True`)."""
    same_image = x.shape[0] == 1 or x.shape[1] == out.shape[1]
    return x.shape[2:] == out.shape[2:] and same_image and bool(x.ctypes.data == out.ctypes.data)


def conv_winograd(
    x, w, b, out, geo: Geometry, scratch: Scratch, spec, u: np.ndarray | None = None, over: bool = False
) -> None:
    """Conv of `x` by `w` (+ `b`, then activation `spec`) into `out`, x and out C-contiguous
    float32; `u` the weight's prepared transform or None (then made into the workspace). With
    `over` (`over_input`), out is x's memory: before a band writes its output rows, the input
    rows the next band reads among them (its top pad's worth) are copied aside. Without `u`
    the weight must be `per_call`."""
    assert jit_winograd.weights is not None and jit_winograd.inputs is not None and jit_winograd.outputs is not None
    blocks = layout(x.shape, w.shape, geo, with_weights=u is None)
    if u is None:
        u = _planes(scratch.take(*blocks.pop(0)), w.shape[0], w.shape[1])
        jit_winograd.weights(w, u)
    zeros_and_z = scratch.take(*blocks[0])
    zeros, z = zeros_and_z[: x.shape[3]], zeros_and_z[x.shape[3] :]
    zeros.fill(0.0)
    saved = scratch.take(*blocks[1])
    v_all, m_all = (scratch.take(shape, dtype) for shape, dtype in blocks[2:])
    channels = x.shape[1]
    tiles_h, tiles_w = _tiles(geo)
    band_rows = _band_tile_rows(x.shape, w.shape, geo)
    filters, out_h, out_w = out.shape[1:]
    tile = jit_winograd.TILE
    ph, pw = geo.begin
    height = x.shape[2]
    for n in range(x.shape[0]):
        image = out[n]
        flat = image.reshape(filters, -1)
        first_saved, held = -1, saved[:0]
        for row in range(0, tiles_h, band_rows):
            rows = min(band_rows, tiles_h - row)
            t0, nt = row * tiles_w, rows * tiles_w
            # (16, ., nt) views with contiguous planes: the last, shorter band too
            v, m = _planes(v_all, channels, nt), _planes(m_all, filters, nt)
            jit_winograd.inputs(
                x[n], v_all, _stride(channels * nt), zeros, held, first_saved, t0, nt, tiles_w, ph, pw, z
            )
            if over:
                first_saved = (row + rows) * tile - ph
                held = saved[: max(0, min(saved.shape[0], height - first_saved))]
                np.copyto(held, x[n, :, first_saved : first_saved + held.shape[0]].transpose(1, 0, 2))
            np.matmul(u, v, out=m)
            jit_winograd.outputs(m_all, _stride(filters * nt), image, t0, nt, tiles_w, z)
            start, stop = row * tile * out_w, min(out_h, (row + rows) * tile) * out_w
            jit_conv.epilogue(flat, b, start, stop, spec)
