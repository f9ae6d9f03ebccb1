"""QLinearConv's routes, one table of values (`ROUTES`, each a `QConvRoute`: name, when it applies,
its workspace, its constants, its run) and one choice per shape (`QConvShape.route`), as Conv's
route table (`runtime.kernels.conv.routes`) is laid out: the planner's workspace, the prepared
constants and the bound call all read the one route picked for a node's shapes.

* "depthwise" (one filter per channel, 2-D, at most 256 taps): `jit_qlinear.DEPTHWISE`, summed in
  float32 a channel at a time over the input's phase planes and requantized as it goes; its
  scratch is one channel's planes and sums.
* "gemm" (any other 2-D conv): per image, group and band of output rows, the band's im2col columns
  in float32 straight from the 8-bit input (`jit_qlinear.COLUMNS`), float32 BLAS against the filter
  less its zero point, and one compiled requantizing pass. The input's zero point is not
  subtracted from the columns: ``sum((x - xz) * w) = sum(x * w) - xz * sum(w)``, and the second
  term is folded into the bias once. Why float32 is exact: every product ``x * w`` is an integer,
  and each depth chunk (`depth_chunks`, from the filter's values) keeps ``max|x| * sum|w|`` of every
  filter row within 2**24, so every partial sum BLAS forms, in any order, is an integer of at most
  2**24 in magnitude, which float32 holds exactly; chunks add up in int32 (TFLite's accumulator).
* "general": the numpy route of `runtime.kernels.quantized.qlinear_conv` (no compiled loops,
  another rank, or a 16-bit input).

The filter less its zero point, the folded bias and the requantization table are worked out once
per node (the kernel's constants hook), or per call where the node's constants are not prepared.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels._scratch import Scratch, scratch_bytes, units_within
from runtime.kernels.conv.routes import ConvGeometry
from runtime.kernels.quantized.jit_conv_int import channel_table
from runtime.kernels.quantized.jit_qlinear import (
    ACCUMULATE,
    COLUMNS,
    DEPTHWISE,
    REQUANTIZE,
    SCALE_CHANNELS,
    phase_layout,
)
from runtime.kernels.window import Geometry, window_geometry

Step = Callable[[], object]  # one loop or BLAS call of a route, its arguments bound
EXACT = 1 << 24  # float32 holds every integer up to here
# A gemm band's columns and sums. 256 KB leaves the int8 arenas of the quantized bench models as they
# were without the compiled route (their peaks are early layers' activations); deeper layers need
# bands this large for BLAS to run at speed (a 64 KB band made ResNet's 7x7 maps' products 1.7x slower).
BAND_BYTES = 1 << 18
# ... but never fewer columns than this (or the whole map): a layer of 1,024-2,048 output channels fills
# the budget with a dozen columns, where BLAS ran at a third of its speed; such layers' maps are small
# (ResNet-50's last stages): the larger bands leave the bench models' arenas as they were but SqueezeNet's (+1%)
MIN_COLUMNS = 96
CHUNK_ROWS = 256  # a band's columns are made and multiplied a depth chunk of about this many rows at a time
ON = COLUMNS is not None and REQUANTIZE is not None and ACCUMULATE is not None and DEPTHWISE is not None


class QConvShape(NamedTuple):
    """A QLinearConv's shapes and attributes (Conv's value of them) and its input and output dtypes."""

    conv: ConvGeometry
    dtype: str
    y_dtype: str

    @staticmethod
    def of(x: Any, w: Any, y: Any, attrs: dict[str, Any]) -> QConvShape:
        return QConvShape(ConvGeometry.of(x.shape, w.shape, y.shape, attrs), str(x.dtype), str(y.dtype))

    @property
    def x(self) -> tuple[int, ...]:
        return self.conv.x

    @property
    def w(self) -> tuple[int, ...]:
        return self.conv.w

    @property
    def y(self) -> tuple[int, ...]:
        return self.conv.y

    @property
    def group(self) -> int:
        return self.conv.group

    @property
    def route(self) -> tuple[Geometry, QConvRoute]:
        return _pick(self)

    @property
    def depthwise(self) -> bool:
        return self.group == self.x[1] == self.y[1] and self.w[1] == 1

    @property
    def compiled_geometry(self) -> np.ndarray:
        """(strides, dilations, pads before) as the compiled loops take them, made once per shape."""
        return _compiled_geometry(self)

    @property
    def gemm_blocks(self) -> list[tuple[tuple[int, int], type]]:
        """The gemm route's scratch for one band: its float32 columns and sums, and its int32 sums
        over depth chunks where the shape allows more than one (`depth_chunks`)."""
        return _gemm_blocks(self)


@functools.lru_cache(maxsize=1024)
def _compiled_geometry(s: QConvShape) -> np.ndarray:
    geo = s.route[0]
    return np.asarray((*geo.strides, *geo.dilations, *geo.begin), np.int64)


@functools.lru_cache(maxsize=1024)
def _gemm_blocks(s: QConvShape) -> list[tuple[tuple[int, int], type]]:
    geo = s.route[0]
    depth, per_group = s.x[1] // s.group * math.prod(geo.kernel), s.y[1] // s.group
    chunk = _chunk_rows(s)
    # any 8-bit filter less its zero point is within 255: one chunk where the depth keeps that exact
    chunked = depth > chunk or depth * _x_max(s.dtype) * 255 > EXACT
    if not chunked:  # every group's columns and sums at once (fewer, larger calls)
        depth, per_group = depth * s.group, per_group * s.group
    unit = geo.out[1] * (4 * min(depth, chunk if chunked else depth) + 4 * per_group * (2 if chunked else 1))
    rows = max(units_within(BAND_BYTES, unit, geo.out[0]), min(geo.out[0], -(-MIN_COLUMNS // geo.out[1])))
    columns = rows * geo.out[1]
    blocks: list[tuple[tuple[int, int], type]] = [
        ((min(depth, chunk) if chunked else depth, columns), np.float32),
        ((per_group, columns), np.float32),
    ]
    return blocks + [((per_group, columns), np.int32)] if chunked else blocks


def _chunk_rows(s: QConvShape) -> int:
    """The most columns' rows a depth chunk takes: whole channels' taps, about CHUNK_ROWS."""
    taps = math.prod(s.route[0].kernel)
    return taps * max(1, CHUNK_ROWS // taps)


@functools.lru_cache(maxsize=1024)
def _pick(s: QConvShape) -> tuple[Geometry, QConvRoute]:
    c = s.conv
    geo = window_geometry(c.x, c.y, c.kernel_shape or c.w[2:], c.auto_pad, c.pads, c.strides, c.dilations)
    return geo, next(r for r in ROUTES if r.applies(s, geo))


def _x_max(dtype: str) -> int:
    return max(abs(v) for v in qa.dtype_range(np.dtype(dtype)))


@dataclass(frozen=True)
class QConvRoute:
    """One way to run a QLinearConv: `applies(shape, geo)`, `blocks(shape, geo)` (its workspace as
    (shape, dtype) blocks), `constants(shape, geo, values)` (a dict of arrays, from the node's 9 input
    values) and ``run(shape, geo, values, out, scratch, made)`` (`scratch`: the blocks taken from the
    workspace, `scratch_of`); the general route has none of its own."""

    name: str
    applies: Callable[[QConvShape, Geometry], bool]
    blocks: Callable[[QConvShape, Geometry], Sequence[tuple[tuple[int, ...], type]]] | None = None
    constants: Callable[[QConvShape, Geometry, Sequence[Any]], dict[str, np.ndarray]] | None = None
    run: Callable[..., None] | None = None
    steps: Callable[..., list[Step]] | None = None

    def workspace(self, s: QConvShape, geo: Geometry) -> int:
        return scratch_bytes(*self.blocks(s, geo)) if self.blocks is not None else 0

    def scratch_of(self, s: QConvShape, geo: Geometry, ws: np.ndarray | None) -> list[np.ndarray]:
        """The route's blocks carved from `ws` (a node's workspace: carved once per session)."""
        scratch = Scratch(ws, "QLinearConv")
        return [scratch.take(*block) for block in self.blocks(s, geo)] if self.blocks is not None else []


def _eight_bit_2d(s: QConvShape, geo: Geometry) -> bool:
    return ON and len(geo.kernel) == 2 and s.dtype in ("int8", "uint8") and s.y_dtype in ("int8", "uint8")


def _one(v: Any) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def _filters(w: np.ndarray, w_zero: Any) -> np.ndarray:
    """float32 ``w - w_zero`` (a zero point per output channel or one), exact for 8-bit values."""
    z = np.asarray(0 if w_zero is None else w_zero).astype(np.float32).reshape(-1)
    return w.astype(np.float32) - (z.reshape(-1, *([1] * (w.ndim - 1))) if z.size > 1 else z[0])


def _table(values: Sequence[Any], out_dtype: Any, bias: np.ndarray | None) -> np.ndarray:
    """The requantization table: TFLite's multiplier per output channel of x_scale * w_scale / y_scale."""
    x_scale, w, w_scale, y_scale, y_zero = values[1], values[3], values[4], values[6], values[7]
    channels = w.shape[0]
    scales = np.broadcast_to(np.asarray(w_scale, np.float64).reshape(-1), (channels,))
    multiplier, shift = qa.quantize_multiplier(_one(x_scale) * scales / _one(y_scale))
    zero = 0 if y_zero is None else int(_one(y_zero))
    return channel_table(bias, multiplier, shift, zero, *qa.dtype_range(out_dtype), channels)


def _bias(values: Sequence[Any], channels: int) -> np.ndarray:
    b = values[8] if len(values) > 8 else None
    return np.zeros(channels, np.int64) if b is None else np.asarray(b, np.int64).reshape(-1)


def depth_chunks(filters: np.ndarray, x_max: int, step: int = 1, most: int | None = None) -> np.ndarray:
    """Boundaries [0, k1, ..., depth] of the depth chunks of a (rows, depth) filter matrix in which
    every row's ``x_max * sum|w|`` stays within 2**24 (so float32 sums of a chunk are exact): each
    at most `most` long and a multiple of `step` (a channel's taps, which alone stay within it)."""
    depth = filters.shape[1]
    cumulative = np.concatenate([np.zeros((filters.shape[0], 1)), np.cumsum(np.abs(filters), axis=1)], axis=1)
    limit = EXACT // x_max
    bounds, k0 = [0], 0
    while k0 < depth:
        fits = (cumulative[:, k0 + 1 :] - cumulative[:, k0 : k0 + 1] <= limit).all(axis=0)
        length = int(np.argmin(fits)) if not fits.all() else fits.size
        length = min(length, most or depth)
        k0 = min(depth, k0 + max(step, length // step * step))
        bounds.append(k0)
    return np.asarray(bounds, np.int64)


# ---- depthwise --------------------------------------------------------------------------------------


def _depthwise_applies(s: QConvShape, geo: Geometry) -> bool:
    # 256 taps of products under 2**16 stay within 2**24: float32 sums are exact
    return _eight_bit_2d(s, geo) and s.depthwise and math.prod(geo.kernel) <= 256


def _depthwise_constants(s: QConvShape, geo: Geometry, values: Sequence[Any]) -> dict[str, np.ndarray]:
    channels = s.w[0]
    return {
        "q_filters": np.ascontiguousarray(_filters(values[3], values[5]).reshape(channels, *geo.kernel)),
        "q_table": _table(values, np.dtype(s.y_dtype), _bias(values, channels)),
    }


def _scales_channels(geo: Geometry) -> bool:
    """A 1x1 depthwise conv, unpadded at stride one: a scale per channel, no window."""
    return geo.kernel == (1, 1) and geo.strides == (1, 1) and not geo.padded


@functools.lru_cache(maxsize=1024)
def _depthwise_blocks(s: QConvShape, geo: Geometry) -> list[tuple[tuple[int, ...], type]]:
    if _scales_channels(geo):
        return []
    kh, kw = geo.kernel
    phases, rows, width = phase_layout(geo.out[0], geo.out[1], kh, kw, s.compiled_geometry)
    return [((phases, rows * width), np.float32), ((geo.out[0] * width,), np.float32)]


def _depthwise_steps(s: QConvShape, geo: Geometry, values, out, scratch, made) -> list[Step]:
    x, x_zero = values[0], values[2]
    if _scales_channels(geo):
        scales, zero = made["q_filters"].reshape(-1), 0 if x_zero is None else int(_one(x_zero))
        pixels = out.shape[2] * out.shape[3]
        return [
            functools.partial(SCALE_CHANNELS, x[n].reshape(-1, pixels), zero, scales, made["q_table"],
                              out[n].reshape(-1, pixels))
            for n in range(x.shape[0])
        ]  # fmt: skip
    planes, acc = scratch
    compiled_geo, xz = s.compiled_geometry, np.float32(0 if x_zero is None else _one(x_zero))
    return [
        functools.partial(DEPTHWISE, x[n], xz, made["q_filters"], made["q_table"], compiled_geo, out[n], planes, acc)
        for n in range(x.shape[0])
    ]


# ---- gemm -------------------------------------------------------------------------------------------


def _gemm_constants(s: QConvShape, geo: Geometry, values: Sequence[Any]) -> dict[str, np.ndarray]:
    channels = s.w[0]
    filters = _filters(values[3], values[5]).reshape(channels, -1)
    x_zero = 0 if values[2] is None else int(_one(values[2]))
    folded = _bias(values, channels) - x_zero * filters.astype(np.int64).sum(axis=1)
    return {
        "q_filters": np.ascontiguousarray(filters),
        "q_table": _table(values, np.dtype(s.y_dtype), folded),
        "q_chunks": depth_chunks(filters, _x_max(s.dtype), math.prod(geo.kernel), _chunk_rows(s)),
    }


def _gemm_steps(s: QConvShape, geo: Geometry, values, out, blocks, made) -> list[Step]:
    x, fill = values[0], 0 if values[2] is None else int(_one(values[2]))
    filters, table, chunks = made["q_filters"], made["q_table"], made["q_chunks"]
    per_group, depth_in = s.y[1] // s.group, s.x[1] // s.group
    columns_all, part_all, acc_all = blocks[0], blocks[1], blocks[-1]  # without chunks: no acc
    rows, ow = columns_all.shape[1] // geo.out[1], geo.out[1]
    if chunks.size > 2 and len(blocks) < 3:
        raise ValueError(f"QLinearConv: {chunks.size - 1} depth chunks where the workspace holds one")
    compiled_geo, (kh, kw) = s.compiled_geometry, geo.kernel
    flat = out.reshape(out.shape[0], out.shape[1], -1)
    taps = kh * kw
    steps: list[Step] = []
    for n in range(x.shape[0]):
        for r0 in range(0, geo.out[0], rows):
            r1 = min(geo.out[0], r0 + rows)
            count = (r1 - r0) * ow
            part = _front(part_all, count)
            if len(blocks) == 2:  # one depth chunk: every group's columns, products and outputs at once
                columns = _front(columns_all, count)
                steps.append(functools.partial(COLUMNS, x[n], fill, compiled_geo, kh, kw, r0, r1, columns))
                depth = columns.shape[0] // s.group
                for g in range(s.group):
                    rows_g = slice(g * per_group, (g + 1) * per_group)
                    steps.append(
                        functools.partial(np.matmul, filters[rows_g], columns[g * depth : (g + 1) * depth],
                                          out=part[rows_g])
                    )  # fmt: skip
                steps.append(functools.partial(REQUANTIZE, part, table, 0, flat[n, :, r0 * ow : r1 * ow]))
                continue
            for g in range(s.group):
                weights = filters[g * per_group : (g + 1) * per_group]
                c0 = g * per_group
                target = flat[n, c0 : c0 + per_group, r0 * ow : r1 * ow]
                acc = _front(acc_all, count)
                for i in range(chunks.size - 1):
                    k0, k1 = int(chunks[i]), int(chunks[i + 1])
                    columns = _front(columns_all[: k1 - k0], count)
                    channels = x[n, g * depth_in + k0 // taps : g * depth_in + k1 // taps]
                    steps.append(functools.partial(COLUMNS, channels, fill, compiled_geo, kh, kw, r0, r1, columns))
                    steps.append(functools.partial(np.matmul, weights[:, k0:k1], columns, out=part))
                    if chunks.size > 2:
                        steps.append(functools.partial(ACCUMULATE, acc, part, i == 0))
                steps.append(functools.partial(REQUANTIZE, acc if chunks.size > 2 else part, table, c0, target))
    return steps


def _run_steps(steps_of: Callable[..., list[Step]]) -> Callable[..., None]:
    """A route's run: its steps for these arrays made, then taken in order."""

    def run(s: QConvShape, geo: Geometry, values, out, scratch, made) -> None:
        for step in steps_of(s, geo, values, out, scratch, made):
            step()

    return run


def _front(block: np.ndarray, columns: int) -> np.ndarray:
    """The first ``rows x columns`` elements of a 2-D block, contiguous (BLAS takes no column slice)."""
    return block.reshape(-1)[: block.shape[0] * columns].reshape(block.shape[0], columns)


ROUTES = (
    QConvRoute("depthwise", _depthwise_applies, _depthwise_blocks,
               _depthwise_constants, _run_steps(_depthwise_steps), _depthwise_steps),
    QConvRoute("gemm", lambda s, geo: _eight_bit_2d(s, geo) and not s.depthwise and math.prod(geo.kernel) <= 256,
               lambda s, geo: s.gemm_blocks, _gemm_constants,
               _run_steps(_gemm_steps), _gemm_steps),
    QConvRoute("general", lambda s, geo: True),
)  # fmt: skip
