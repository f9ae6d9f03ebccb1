"""A dense Conv written over its own input: pixel-wise (1x1) and row-lagged (KxK, 'same' size).

Both forms let the planner start a Conv's output at input 0's first byte when the input
dies at that step (`runtime.inplace`), whatever the output's size, so the step holds one
block of max(input, output) bytes instead of both. They apply to an ungrouped conv
(``group == 1``) whose output has the input's spatial size, with stride 1, and

* **columns**: a 1x1 conv without pads (any spatial rank); output[n, :, s] depends only on
  input[n, :, s];
* **rows**: a 2-D KxK conv (any dilation) whose pads keep the size ('same'); output row r
  reads input rows r - pad_top + i * dilation, so input row i is last read by output row
  i + pad_top;

and only where the channel geometry below holds: one batch item (N == 1), or no more
output channels than input channels (Cout <= Cin).

Why the overlap is safe. With S = H * W pixels per plane, output element (n, o, s) sits at
element (n * Cout + o) * S + s of the block, which holds input element (n', c', s) with
n' * Cin + c' = n * Cout + o: the *same pixel* s (same row, same column) of item
n' = (n * Cout + o) // Cin. When Cout <= Cin, n * Cout + o < (n + 1) * Cin, so n' <= n;
when N == 1 any n' >= 1 lies past the input's end. The kernel takes items in order, so
an item n' < n was read completely before item n's output is written, and within the
item only the pixel's own position matters:

* columns: a chunk of columns [s0, s1) is computed for every output channel into scratch
  (Cout x chunk), then written: it overwrites input pixels of those columns only, all read
  into that chunk already, and later chunks read other columns. With one item and more
  output than input channels, output planes [Cin, Cout) lie past the input's end: they are
  computed first, by one matmul straight into place, and only the first Cin output planes
  go through the chunk (MobileNetV2's expansions copy a sixth of their output);
* rows: output rows are computed band by band (the band's im2col, built straight from the
  unpadded input with zeros where the window leaves it, then one matmul; or, with at most
  half as many filters as channels, one matmul per kernel tap over the band's input rows
  copied into a zero-padded band buffer) into scratch, and
  output row r is written only once output rows up to r + pad_top are computed: every
  reader of input row r is done. The rows of a band not yet writable (the last pad_top) wait
  in a hold buffer until the next band; the band's im2col reads input rows from
  r0 - pad_top on, none of them written yet.

A fused activation (ConvAct) runs over each contiguous block of scratch before it is
written. The scratch is declared as workspace (`OverRoute.layout`); the routes (`OVER_COLUMNS`,
`OVER_ROWS`, each an `OverRoute`) also run on
separate memory, but `runtime.kernels.conv.conv` takes them only when output and input overlap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from runtime.kernels import window
from runtime.kernels._scratch import Scratch, scratch_bytes, units_within
from runtime.kernels.conv import jit_conv, winograd
from runtime.kernels.window import Geometry

# Bytes of one chunk of output columns (all output channels) on the pixel-wise route: large
# enough for a GEMM of a few hundred columns, small beside the tensors it saves.
COLUMNS_BYTES = 256 * 1024

Finish = Callable[[np.ndarray], None]
Layout = list[tuple[tuple[int, ...], np.dtype]]


def over_route(x_shape, w_shape, y_shape, group: int, geo: Geometry) -> OverRoute | None:
    """How this Conv may run with its output over its input: `OVER_COLUMNS`, `OVER_ROWS` or None."""
    if group != 1 or len(x_shape) < 3 or len(y_shape) != len(x_shape) or tuple(y_shape[2:]) != tuple(x_shape[2:]):
        return None
    batch, channels, filters = x_shape[0], x_shape[1], w_shape[0]
    if batch != 1 and filters > channels:
        return None  # an item's output would reach bytes of the next item, not read yet
    if any(s != 1 for s in geo.strides):
        return None
    if not geo.padded and all(k == 1 for k in geo.kernel):
        return OVER_COLUMNS
    if len(geo.kernel) == 2 and all(b >= 0 for b in geo.begin):
        return OVER_ROWS
    return None


def columns_layout(x_shape, w_shape, dtype, geo: Geometry | None = None) -> Layout:
    """Workspace blocks of the pixel-wise route: its chunk of columns (all output channels)."""
    dtype = np.dtype(dtype)
    pixels = math.prod(x_shape[2:])
    rows = w_shape[0] - _spill(x_shape, w_shape)
    return [((rows, _columns(rows, pixels, dtype)), dtype)]


def rows_layout(x_shape, w_shape, dtype, geo: Geometry) -> Layout:
    """Workspace blocks of the row-lagged route: the hold rows, then its band's im2col or taps buffers."""
    dtype = np.dtype(dtype)
    channels, filters = x_shape[1], w_shape[0]
    rows = _band_rows(x_shape, w_shape, geo, dtype)
    height, width = x_shape[2:]
    kh, kw = geo.kernel
    hold = min(geo.begin[0], height) if rows < height else 0  # one band: every row is ready at once
    common = [((filters, hold * width), dtype)]
    if by_taps(x_shape, w_shape):
        padded = _padded_width(width, geo)
        return common + [  # the band computed ends in the last block, free again after the taps
            ((kh, kw, filters, channels), dtype),
            ((channels, rows + geo.extent[0], padded), dtype),  # the band's rows, halo, one spare row
            ((filters, rows * padded), dtype),
            ((filters, rows * padded), dtype),
        ]
    return common + [((filters, rows * width), dtype), ((channels, kh, kw, rows, width), dtype)]


def by_taps(x_shape, w_shape) -> bool:
    """Whether a band is computed one matmul per kernel tap (at most half as many filters as
    channels: an im2col band would be larger than the output band, as in `conv.uses_taps`)."""
    return 2 * w_shape[0] <= x_shape[1]


def _padded_width(width: int, geo: Geometry) -> int:
    return width + geo.begin[1] + geo.end[1]


def _spill(x_shape, w_shape) -> int:
    """Output planes past the input's end (one item with more output than input channels):
    written straight by the matmul, before any input byte is overwritten."""
    return max(0, w_shape[0] - x_shape[1]) if x_shape[0] == 1 else 0


def _columns(filters: int, pixels: int, dtype: np.dtype) -> int:
    return units_within(COLUMNS_BYTES, filters * dtype.itemsize, pixels)


def _band_rows(x_shape, w_shape, geo: Geometry, dtype: np.dtype) -> int:
    """Rows per band: within the im2col budget (by taps: the accumulator's), but at least
    pad_top (so a band's writable rows never run behind the hold), and at most the image."""
    channels, height, width = x_shape[1], x_shape[2], x_shape[3]
    if by_taps(x_shape, w_shape):
        per_row = w_shape[0] * _padded_width(width, geo) * dtype.itemsize
    else:
        per_row = channels * math.prod(geo.kernel) * width * dtype.itemsize
    rows = units_within(window.IM2COL_BLOCK_BYTES, per_row, height)
    if not by_taps(x_shape, w_shape):
        rows = window.band_rows(rows, width, height)
    return min(height, max(rows, geo.begin[0]))


def conv_columns(x, w, b, out, geo: Geometry, finish: Finish | None, scratch: Scratch) -> None:
    """Pixel-wise 1x1 conv, a chunk of columns at a time through scratch (see the module)."""
    batch, channels = x.shape[:2]
    filters = w.shape[0]
    pixels = math.prod(x.shape[2:])
    spill = _spill(x.shape, w.shape)
    rows = filters - spill
    step = _columns(rows, pixels, out.dtype)
    chunk = scratch.take((rows * step,), out.dtype)
    weights = w.reshape(filters, channels)
    # Bias and activation in one compiled pass over each block (None: numpy's passes).
    spec = jit_conv.spec_of(finish) if jit_conv.usable(x, out) else None
    for n in range(batch):
        source = x[n].reshape(channels, pixels)
        target = out[n].reshape(filters, pixels)
        if spill:
            # Planes [Cin, Cout) lie past the input: one matmul, while the input is still whole.
            np.matmul(weights[rows:], source, out=target[rows:])
            _bias_and_finish(target[rows:], None if b is None else b[rows:], finish, spec)
        for s in range(0, pixels, step):
            m = min(step, pixels - s)
            block = chunk[: rows * m].reshape(rows, m)
            np.matmul(weights[:rows], source[:, s : s + m], out=block)
            _bias_and_finish(block, None if b is None else b[:rows], finish, spec)
            # Columns [s, s + m) of the output channels over the input: its bytes of these columns only.
            np.copyto(target[:rows, s : s + m], block)


def _bias_and_finish(y: np.ndarray, bias: np.ndarray | None, finish: Finish | None, spec) -> None:
    """Bias per row of the 2-D block `y`, then the activation: one compiled pass with a `spec`."""
    if spec is not None:
        jit_conv.epilogue(y, bias, 0, y.shape[1], spec)
        return
    if bias is not None:
        y += bias[:, None]
    if finish is not None:
        finish(y)


def conv_rows(x, w, b, out, geo: Geometry, finish: Finish | None, scratch: Scratch) -> None:
    """Row-lagged KxK 'same' conv: bands of output rows into scratch, each row written once
    every output row reading its input row is computed (see the module)."""
    batch, _, height, width = x.shape
    filters = w.shape[0]
    layout = rows_layout(x.shape, w.shape, out.dtype, geo)
    blocks = [scratch.take((math.prod(shape),), dtype) for shape, dtype in layout]
    hold = blocks[0]
    rows = _band_rows(x.shape, w.shape, geo, np.dtype(out.dtype))
    compute = _TapsBand(x, w, geo, layout, blocks) if by_taps(x.shape, w.shape) else _Im2colBand(x, w, geo, blocks)
    lag = min(geo.begin[0], height)
    # Bias and activation in one compiled pass over the band (None: numpy's passes).
    spec = jit_conv.spec_of(finish) if jit_conv.usable(x, out) else None
    for n in range(batch):
        waiting = 0  # rows held back, starting at output row r0 - waiting
        for r0 in range(0, height, rows):
            m = min(rows, height - r0)
            computed = compute(n, r0, m)  # (filters, m * width), contiguous
            if spec is not None:
                jit_conv.epilogue(computed, b, 0, computed.shape[1], spec)
            else:
                if b is not None:
                    computed += b[:, None]
                if finish is not None:
                    finish(computed)
            last = r0 + m >= height
            # Output rows < r0 + m - lag have every reader of their input row computed.
            ready = m if last else m - lag
            if waiting:
                held = hold[: filters * waiting * width].reshape(filters, waiting, width)
                np.copyto(out[n, :, r0 - waiting : r0], held)
            np.copyto(out[n, :, r0 : r0 + ready], computed.reshape(filters, m, width)[:, :ready])
            waiting = m - ready
            if waiting:
                np.copyto(hold[: filters * waiting * width].reshape(filters, -1), computed[:, ready * width :])


class _Im2colBand:
    """A band of output rows as one matmul over the band's im2col (read from the unpadded image)."""

    def __init__(self, x, w, geo: Geometry, blocks: list[np.ndarray]) -> None:
        self.x, self.geo, self.band, self.col = x, geo, blocks[1], blocks[2]
        self.weights = w.reshape(w.shape[0], -1)
        self.taps = (x.shape[1], *geo.kernel)
        self.compiled = jit_conv.takes_im2col(geo, x.dtype) and jit_conv.usable(x)  # one pass, zeros in the loop

    def __call__(self, n: int, r0: int, m: int) -> np.ndarray:
        width = self.x.shape[3]
        cols = self.col[: math.prod(self.taps) * m * width].reshape(*self.taps, m, width)
        if self.compiled:
            jit_conv.im2col_into(self.x[n], cols.reshape(-1), r0, m, self.geo)
        else:
            _band_im2col(self.x[n], cols, r0, m, self.geo)
        computed = self.band[: self.weights.shape[0] * m * width].reshape(self.weights.shape[0], m * width)
        np.matmul(self.weights, cols.reshape(self.weights.shape[1], m * width), out=computed)
        return computed


class _TapsBand:
    """A band of output rows as one matmul per kernel tap, each over a plain view of the band's
    input rows copied into a zero-padded buffer (`conv._conv_taps`, a band at a time): output
    (r, c) over the padded width P is flat position r * P + c, and tap (i, j) reads the padded
    rows at that position plus i * dh * P + j * dw; the spare columns are dropped."""

    def __init__(self, x, w, geo: Geometry, layout, blocks: list[np.ndarray]) -> None:
        self.x, self.geo = x, geo
        (per_tap_shape, _), (padded_shape, _), (acc_shape, _) = (layout[1], layout[2], layout[3])
        self.per_tap = blocks[1].reshape(per_tap_shape)
        np.copyto(self.per_tap, w.transpose(2, 3, 0, 1))  # each tap's (filters, channels) contiguous
        self.padded, self.acc, self.part = blocks[2], blocks[3], blocks[4]
        self.padded_shape = padded_shape
        self.filters = acc_shape[0]

    def __call__(self, n: int, r0: int, m: int) -> np.ndarray:
        geo, image = self.geo, self.x[n]
        channels, height, width = image.shape
        padded_width = self.padded_shape[2]
        span = m + geo.extent[0]  # input rows the band reads, and one spare row
        buffer = self.padded[: channels * span * padded_width].reshape(channels, span, padded_width)
        top, left = r0 - geo.begin[0], geo.begin[1]
        lo, hi = max(0, -top), min(span, height - top)
        buffer.fill(0)
        if hi > lo:
            np.copyto(buffer[:, lo:hi, left : left + width], image[:, top + lo : top + hi])
        flat = buffer.reshape(channels, -1)
        total = self.acc[: self.filters * m * padded_width].reshape(self.filters, -1)
        extra = self.part[: self.filters * m * padded_width].reshape(self.filters, -1)
        (dh, dw) = geo.dilations
        for k, (i, j) in enumerate(np.ndindex(*geo.kernel)):
            shift = i * dh * padded_width + j * dw
            np.matmul(self.per_tap[i, j], flat[:, shift : shift + m * padded_width], out=total if k == 0 else extra)
            if k:
                total += extra
        # The band without its spare columns, contiguous, in `part` (free again after the taps).
        computed = self.part[: self.filters * m * width].reshape(self.filters, m * width)
        np.copyto(computed.reshape(self.filters, m, width), total.reshape(self.filters, m, padded_width)[:, :, :width])
        return computed


def _band_im2col(image, col, r0: int, m: int, geo: Geometry) -> None:
    """col[c, i, j, t, v] = image[c, r0 + t + i * dh - pt, v + j * dw - pl], zero outside the
    image: output rows [r0, r0 + m) of a stride-1 conv, read from the unpadded image."""
    height, width = image.shape[1:]
    (dh, dw), (pt, pl) = geo.dilations, geo.begin
    for i in range(geo.kernel[0]):
        top = r0 + i * dh - pt  # input row of band row 0
        lo, hi = max(0, -top), min(m, height - top)
        for j in range(geo.kernel[1]):
            left = j * dw - pl
            a, z = max(0, -left), min(width, width - left)
            tap = col[:, i, j]
            if hi <= lo or z <= a:
                tap.fill(0)
                continue
            np.copyto(tap[:, lo:hi, a:z], image[:, top + lo : top + hi, left + a : left + z])
            if lo:
                tap[:, :lo].fill(0)
            if hi < m:
                tap[:, hi:].fill(0)
            if a:
                tap[:, lo:hi, :a].fill(0)
            if z < width:
                tap[:, lo:hi, z:].fill(0)


@dataclass(frozen=True)
class OverRoute:
    """A way for a dense Conv to run with its output over its own input, as one value: its name,
    whether each output pixel reads its own input pixel alone (`pixel_wise`: chunks of columns;
    else output rows lag their input rows by the top pad), its workspace blocks (`layout(x_shape,
    w_shape, dtype, geo)`), its run (`run(x, w, b, out, geo, finish, scratch)`), whether Winograd's
    over-input variant takes it where Winograd applies, and the loops it runs (for docs/KERNELS.md)."""

    name: str
    pixel_wise: bool
    layout: Callable[..., Layout]
    run: Callable[..., None]
    loops: tuple[str, ...]
    winograd: bool = False

    def bytes(self, x_shape, w_shape, dtype, geo: Geometry) -> int:
        """The workspace this route declares."""
        return scratch_bytes(*self.layout(x_shape, w_shape, dtype, geo))

    def call(self, x, w, b, out, geo: Geometry, group: int, ws, finish: Finish | None, winograd_u=None,
             prepared: bool = True) -> None:  # fmt: skip
        """Run over the input with `ws` as scratch (by Winograd's over-input variant where it applies)."""
        scratch = Scratch(ws, "Conv")
        if (
            self.winograd
            and winograd.applies(x, w, b, out, geo, group, winograd_u, prepared)
            and winograd.over_input(x, out)
        ):
            spec = jit_conv.spec_of(finish)
            winograd.conv_winograd(x, w, b, out, geo, scratch, spec or jit_conv.NO_ACTIVATION, winograd_u, over=True)
            if spec is None and finish is not None:
                for n in range(x.shape[0]):
                    finish(out[n])
            return
        self.run(x, w, b, out, geo, finish, scratch)


OVER_COLUMNS = OverRoute(
    "over_columns", True, columns_layout, conv_columns,
    ("over.conv_columns: a matmul per chunk of columns into scratch, then copied over those columns",),
)  # fmt: skip
OVER_ROWS = OverRoute(
    "over_rows", False, rows_layout, conv_rows,
    ("winograd.conv_winograd: its over-input variant (float32 3x3, where Winograd applies)",
     "over.conv_rows: bands of rows by im2col or by taps, each row written once its readers are done"),
    winograd=True,
)  # fmt: skip
