"""Dense 3x3 stride-1 Conv by Winograd's F(2x2, 3x3): 16 matmuls of (K, C) @ (C, tiles), or
on large maps F(4x4, 3x3): 36 matmuls over 4x fewer tiles (`tile_of`).

The transforms are `runtime.kernels.conv.jit_winograd`'s (`jit_winograd4`'s) compiled loops. Per
image, the output's tiles go in bands of tile rows sized so that a band's transformed input V
(16 or 36, C, tiles) and product M (16 or 36, K, tiles) stay within
`window.IM2COL_BLOCK_BYTES` (cache); per band:

1. `jit_winograd.inputs` writes V from the unpadded image (pads read as zeros);
2. ``np.matmul(U, V, out=M)``: 16 (36) BLAS sgemms, U (16 or 36, K, C) the transformed weights;
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
from types import ModuleType

import numpy as np

from runtime.kernels import window
from runtime.kernels._scratch import Scratch, scratch_bytes, units_within
from runtime.kernels.conv import jit_conv, jit_winograd, jit_winograd4
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
# A band of a tiled stage (a few rows of a wide map) below `MIN_PIXELS` keeps im2col: each band runs
# every layer of its stage, so a layer's weights are cold by its next band, and cold, one to four rows
# gain little from the transforms while Winograd's larger workspace raises the tiled arena.
# Transformed weights above this size are read from memory on every call; they pay only over at
# least `MANY_TILES` tiles. (Measurements behind both: docs/BENCHMARKS.md, figures behind the code.)
U_CACHED_BYTES = 4 << 20
MANY_TILES = 14 * 14
POSITIONS = jit_winograd.ALPHA * jit_winograd.ALPHA
# Output pixels per image from which F(4x4, 3x3) (`jit_winograd4`) beats F(2x2): half the
# sgemms' work against larger transforms and weights (36 K C floats, not 16). Measured one
# thread, prepared weights, both alternating: 64 channels at 56 x 56 1.38 against 1.45 ms,
# 128 at 28 x 28 1.24 against 1.41; 256 at 14 x 14 loses, 2.45 against 1.90 (16 tiles, and
# its 9.4 MB of weights come from memory on every call), as 512 at 7 x 7 does (6.5 against 6.1).
F4_MIN_PIXELS = 28 * 28
# Transformed weights (16 K C floats) up to this size are made per call in the workspace (any
# weight); larger ones only at prepare, for a constant weight (`prepared_weights`): 512 by 512
# channels would add 16 MB to the arena (crnn_ocr's 6.8 -> 23.5 MB) for a per-call transform.
WEIGHTS_PER_CALL_BYTES = 2 << 20
# Transformed weights up to this size leave room in cache for bands twice as large (`_band_tile_rows`).
U_IN_CACHE_BYTES = 1 << 20


def takes(geo: Geometry, x_shape, w_shape, group: int, dtype) -> bool:
    """Whether a Conv of this geometry runs by Winograd: compiled loops on, float32, 2-D 3x3,
    stride 1, dilation 1, ungrouped, from at least `MIN_CHANNELS` channels, on a map of at least
    `MIN_PIXELS` output pixels, with transformed weights that stay in cache (`U_CACHED_BYTES`) or
    many tiles to spread their reading over."""
    if not (
        jit_winograd.inputs is not None
        and np.dtype(dtype) == jit_winograd.DTYPE
        and group == 1
        and geo.kernel == (3, 3)
        and geo.strides == (1, 1)
        and geo.dilations == (1, 1)
        and len(x_shape) == 4
        and x_shape[1] >= MIN_CHANNELS
    ):
        return False
    tiles = math.prod(_tiles(geo, 2))
    u_bytes = POSITIONS * x_shape[1] * w_shape[0] * jit_winograd.DTYPE.itemsize
    if u_bytes > U_CACHED_BYTES and tiles < MANY_TILES:
        return False
    return math.prod(geo.out) >= MIN_PIXELS


def applies(x, w, b, out, geo: Geometry, group: int, u, prepared: bool = True) -> bool:
    """Whether a Conv call runs by Winograd: it `takes` Winograd, with arrays its loops take, the
    weight `prepared` (`u`) or small enough to transform per call; never when weights may not be
    transformed (`prepared` False: `runtime.MemoryOptions.prepared_weights` off)."""
    return (
        prepared
        and takes(geo, x.shape, w.shape, group, x.dtype)
        and (u is not None or per_call(w.shape))
        and jit_conv.usable(x, w, out, *(() if b is None else (b,)))
    )


def tile_of(geo: Geometry, x_shape, w_shape, prepared: bool = True) -> int:
    """Output pixels per tile side of the Winograd variant a conv that `takes` Winograd runs:
    4 (F(4x4, 3x3)) where compiled and measured to win, and where the weight is `prepared`
    or small enough to transform per call for it; else 2 (so that a shared weight too large
    for F(4x4)'s per-call transform keeps F(2x2), not im2col)."""
    wins = jit_winograd4.inputs is not None and math.prod(geo.out) >= F4_MIN_PIXELS
    return 4 if wins and (prepared or per_call(w_shape, 4)) else 2


def _loops(tile: int) -> ModuleType:
    """The module of the compiled transforms of F(tile x tile, 3x3)."""
    return jit_winograd4 if tile == 4 else jit_winograd


def _positions(tile: int) -> int:
    return (tile + 2) * (tile + 2)


def _tiles(geo: Geometry, tile: int) -> tuple[int, int]:
    return -(-geo.out[0] // tile), -(-geo.out[1] // tile)


def _band_tile_rows(x_shape, w_shape, geo: Geometry, tile: int) -> int:
    tiles_h, tiles_w = _tiles(geo, tile)
    positions = _positions(tile)
    per_row = positions * (x_shape[1] + w_shape[0]) * tiles_w * jit_winograd.DTYPE.itemsize
    # V and M within im2col's budget while U fits in cache beside them (ResNet's 64 channels at
    # 56 x 56: 1.62 -> 1.47 ms, 128 at 28 x 28: 1.61 -> 1.52), else half of it (256 channels
    # at 14 x 14, U 4 MB: 1.53 ms against 1.93). F(4x4) keeps the whole budget: its rows of
    # tiles are 2.25x larger, and half of it gives sgemms of one row of 7 tiles at 28 x 28
    # (128 channels, U 2.4 MB: 1.63 ms at 1 MB against 1.71 at 512 KB; 2 MB, 1.60, grows
    # ResNet-50's arena by 5%).
    u_bytes = positions * x_shape[1] * w_shape[0] * jit_winograd.DTYPE.itemsize
    halved = u_bytes > U_IN_CACHE_BYTES and tile == 2
    budget = window.IM2COL_BLOCK_BYTES // 2 if halved else window.IM2COL_BLOCK_BYTES
    return units_within(budget, per_row, tiles_h)


def _stride(elements: int) -> int:
    """Elements from one of the 16 planes of U, V or M to the next: at least `elements`, and
    320 bytes past a multiple of 4 KB, so that the loops' 16 streams (one per plane) fall in
    different cache sets (at a multiple of 4 KB, 64 channels by 4 rows of 28 tiles, they all
    share one set and the input transform ran 4.5x slower)."""
    return -(-elements // 1024) * 1024 + 80


def _planes(flat: np.ndarray, rows: int, cols: int, positions: int = POSITIONS) -> np.ndarray:
    """The (positions, rows, cols) view of `flat` with planes `_stride(rows * cols)` apart."""
    stride = _stride(rows * cols)
    return flat[: positions * stride].reshape(positions, stride)[:, : rows * cols].reshape(positions, rows, cols)


def _saved_rows(geo: Geometry) -> int:
    """Input rows a band over its image overwrites before the next band reads them: its top pad."""
    return max(0, min(2, geo.begin[0]))


def per_call(w_shape, tile: int = 2) -> bool:
    """Whether a weight of this shape may be transformed per call (into the workspace) for
    F(tile x tile, 3x3)."""
    return _positions(tile) * w_shape[0] * w_shape[1] * jit_winograd.DTYPE.itemsize <= WEIGHTS_PER_CALL_BYTES


Blocks = list[tuple[tuple[int, ...], np.dtype]]


def layout(x_shape, w_shape, geo: Geometry, with_weights: bool | None = None) -> Blocks:
    """Workspace blocks of a call with U made per call (`with_weights`) or prepared: U when
    made per call, a zero row, the rows saved aside when over the input, then a band's V and
    M, for the variant `tile_of` picks. By default (None), the larger of the two calls'
    blocks (the workspace: a constant weight is prepared, a shared one made per call when
    `per_call`)."""
    if with_weights is None:
        calls = [_layout(x_shape, w_shape, geo, False)]
        if per_call(w_shape):
            calls.append(_layout(x_shape, w_shape, geo, True))
        return max(calls, key=lambda blocks: scratch_bytes(*blocks))
    return _layout(x_shape, w_shape, geo, with_weights)


def _layout(x_shape, w_shape, geo: Geometry, with_weights: bool) -> Blocks:
    tile = tile_of(geo, x_shape, w_shape, prepared=not with_weights)
    positions = _positions(tile)
    channels, filters = x_shape[1], w_shape[0]
    band = _band_tile_rows(x_shape, w_shape, geo, tile) * _tiles(geo, tile)[1]
    dtype: np.dtype = jit_winograd.DTYPE
    # the row a tile reads above or below the image, then the transforms' scratch
    zeros: tuple[tuple[int, ...], np.dtype] = (
        (x_shape[3] + _loops(tile).scratch_elements(_tiles(geo, tile)[1], band),),
        dtype,
    )
    saved = ((_saved_rows(geo), channels, x_shape[3]), dtype)  # rows an output over the image overwrote
    blocks: list[tuple[tuple[int, ...], np.dtype]] = [
        zeros,
        saved,
        ((positions * _stride(channels * band),), dtype),
        ((positions * _stride(filters * band),), dtype),
    ]
    return ([((positions * _stride(filters * channels),), dtype)] if with_weights else []) + blocks


def prepared_weights(w: np.ndarray, tile: int = 2) -> np.ndarray:
    """U (positions, K, C) of a constant weight for F(tile x tile, 3x3), made once (at prepare)
    instead of per call."""
    loops, positions = _loops(tile), _positions(tile)
    assert loops.weights is not None
    flat = np.empty(positions * _stride(w.shape[0] * w.shape[1]), jit_winograd.DTYPE)
    u = _planes(flat, w.shape[0], w.shape[1], positions)
    loops.weights(np.ascontiguousarray(w, dtype=jit_winograd.DTYPE), u)
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
    the weight must be `per_call`; `u`, when given, made for the variant `tile_of`."""
    tile = tile_of(geo, x.shape, w.shape, prepared=u is not None)
    loops, positions = _loops(tile), _positions(tile)
    assert loops.weights is not None and loops.inputs is not None and loops.outputs is not None
    blocks = layout(x.shape, w.shape, geo, with_weights=u is None)
    if u is None:
        u = _planes(scratch.take(*blocks.pop(0)), w.shape[0], w.shape[1], positions)
        loops.weights(w, u)
    assert u.shape[0] == positions, "a Winograd transform made for another variant"
    zeros_and_z = scratch.take(*blocks[0])
    zeros, z = zeros_and_z[: x.shape[3]], zeros_and_z[x.shape[3] :]
    zeros.fill(0.0)
    saved = scratch.take(*blocks[1])
    v_all, m_all = (scratch.take(shape, dtype) for shape, dtype in blocks[2:])
    channels = x.shape[1]
    tiles_h, tiles_w = _tiles(geo, tile)
    band_rows = _band_tile_rows(x.shape, w.shape, geo, tile)
    filters, out_h, out_w = out.shape[1:]
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
            v, m = _planes(v_all, channels, nt, positions), _planes(m_all, filters, nt, positions)
            loops.inputs(x[n], v_all, _stride(channels * nt), zeros, held, first_saved, t0, nt, tiles_w, ph, pw, z)
            if over:
                first_saved = (row + rows) * tile - ph
                held = saved[: max(0, min(saved.shape[0], height - first_saved))]
                np.copyto(held, x[n, :, first_saved : first_saved + held.shape[0]].transpose(1, 0, 2))
            np.matmul(u, v, out=m)
            loops.outputs(m_all, _stride(filters * nt), image, t0, nt, tiles_w, z)
            start, stop = row * tile * out_w, min(out_h, (row + rows) * tile) * out_w
            jit_conv.epilogue(flat, b, start, stop, spec)


def warm() -> None:
    """Compile both variants' loops (or load them from numba's cache), at prepare."""
    jit_winograd.warm()
    jit_winograd4.warm()
