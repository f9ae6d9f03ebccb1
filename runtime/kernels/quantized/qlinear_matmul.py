"""QLinearMatMul's routes, one table of values (`ROUTES`, each a `QMatMulRoute`: name, when it applies,
its workspace, its constants, its run) and one choice per shape (`QMatMulShape.route`), as QLinearConv's
table (`runtime.kernels.quantized.qlinear_routes`) is laid out.

* "rows" (B a 2-D matrix: a layer's weights; A of any rank from 2, its leading axes taken as rows):
  QGemm's compiled route (`runtime.kernels.quantized.qlinear_gemm`): B less its zero point as float32
  rows per output column, A's zero point folded into the bias, float32 BLAS per depth chunk (exact:
  every partial sum an integer within 2**24), one requantizing pass per output column. Made once per
  node where B and the scales are constants, else per call.
* "batched" (B of rank 3 or more: attention's Q @ K^T and scores @ V, both activations): the batch
  axes broadcast as numpy's matmul broadcasts them; per matrix, A and B less their zero points cast
  to float32 in the workspace, float32 BLAS in depth chunks of `BATCH_CHUNK` (a product of two 8-bit
  values less their zero points is at most 255 x 255, so each chunk's sums stay within 2**24), the
  chunks summed in int32 and requantized per output column.
* "general": numpy (16-bit operands, per-row scales or zero points, 1-D operands, compiled loops off).

Scales: A's and Y's per tensor, B's per tensor or per output column (the spec's per-column form) on
the compiled routes; the requantization is TFLite's fixed-point multiplier, so an element may differ
from onnxruntime's float requantization by one step where the real value sits at a tie.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels import TensorMeta, kernel
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.protocol import Bound
from runtime.kernels.quantized.jit_conv_int import channel_table
from runtime.kernels.quantized.jit_qlinear import ACCUMULATE, REQUANTIZE
from runtime.kernels.quantized.qlinear_gemm import gemm_blocks, qgemm_constants, qgemm_run
from runtime.kernels.quantized.qlinear_routes import EXACT

BATCH_CHUNK = EXACT // (255 * 255)  # depth whose sums of products of 8-bit values less zero points stay exact
ON = REQUANTIZE is not None and ACCUMULATE is not None


def _size(meta: Any) -> int:
    return 1 if meta is None else int(np.prod(meta.shape, dtype=np.int64))


class QMatMulShape(NamedTuple):
    """A QLinearMatMul's operand and output shapes and dtypes, and the sizes of its scales and zero
    points (a_scale, a_zero, b_scale, b_zero, y_scale, y_zero)."""

    a: tuple[int, ...]
    b: tuple[int, ...]
    y: tuple[int, ...]
    dtypes: tuple[str, str, str]
    sizes: tuple[int, ...]

    @staticmethod
    def of(inputs: Sequence[Any], outputs: Sequence[Any]) -> QMatMulShape:
        a, b, y = inputs[0], inputs[3], outputs[0]
        sizes = tuple(_size(inputs[i] if i < len(inputs) else None) for i in (1, 2, 4, 5, 6, 7))
        return QMatMulShape(tuple(a.shape), tuple(b.shape), tuple(y.shape),
                            (str(a.dtype), str(b.dtype), str(y.dtype)), sizes)  # fmt: skip

    @property
    def route(self) -> QMatMulRoute:
        return _pick(self)

    @property
    def rows_metas(self) -> tuple[list[Any], list[Any]]:
        """QGemm's input and output metas of the "rows" route: A's leading axes as rows, no C."""
        rows, depth, columns = int(np.prod(self.a[:-1], dtype=np.int64)), self.a[-1], self.b[-1]
        a = TensorMeta((rows, depth), np.dtype(self.dtypes[0]))
        b = TensorMeta(self.b, np.dtype(self.dtypes[1]))
        one = TensorMeta((1,), np.dtype(np.float32))
        return [a, one, one, b, one, one, None, one, one], [TensorMeta((rows, columns), np.dtype(self.dtypes[2]))]


@functools.lru_cache(maxsize=1024)
def _pick(s: QMatMulShape) -> QMatMulRoute:
    return next(r for r in ROUTES if r.applies(s))


@dataclass(frozen=True)
class QMatMulRoute:
    """One way to run a QLinearMatMul: `applies(shape)`, `blocks(shape)` (its workspace as (shape,
    dtype) blocks), `constants(shape, values)` (a dict of arrays, from the node's 8 input values) and
    ``run(shape, values, out, ws, made)``; the general route has none of its own."""

    name: str
    applies: Callable[[QMatMulShape], bool]
    blocks: Callable[[QMatMulShape], Sequence[tuple[tuple[int, ...], type]]] | None = None
    constants: Callable[[QMatMulShape, Sequence[Any]], dict[str, np.ndarray]] | None = None
    run: Callable[..., None] | None = None
    reads: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)  # the inputs its constants are made of

    def workspace(self, s: QMatMulShape) -> int:
        return scratch_bytes(*self.blocks(s)) if self.blocks is not None else 0


def _compiled(s: QMatMulShape) -> bool:
    """8-bit operands and output, matrices (rank 2 or more), per-tensor A and Y, B per tensor or column."""
    eight_bit = all(np.dtype(d).itemsize == 1 and np.dtype(d).kind in "iu" for d in s.dtypes)
    a_scale, a_zero, b_scale, b_zero, y_scale, y_zero = s.sizes
    columns = s.b[-1] if len(s.b) >= 2 else 0
    per_tensor = a_scale == a_zero == y_scale == y_zero == 1
    return ON and eight_bit and len(s.a) >= 2 and len(s.b) >= 2 and per_tensor and {b_scale, b_zero} <= {1, columns}


def _one(v: Any) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def _as_qgemm(values: Sequence[Any]) -> list[Any]:
    """QLinearMatMul's 8 inputs in QGemm's 9 places (no C)."""
    values = list(values) + [None] * (8 - len(values))
    return [*values[:6], None, *values[6:8]]


# ---- rows -------------------------------------------------------------------------------------------


def _rows_constants(s: QMatMulShape, values: Sequence[Any]) -> dict[str, np.ndarray]:
    metas_in, metas_out = s.rows_metas
    given = _as_qgemm(values)
    metas_in = [m if i == 0 or v is not None else None for i, (m, v) in enumerate(zip(metas_in, given, strict=True))]
    return qgemm_constants(given, metas_in, metas_out)


def _rows_run(s: QMatMulShape, values: Sequence[Any], out: np.ndarray, ws: Any, made: dict) -> None:
    qgemm_run(values[0].reshape(-1, s.a[-1]), out.reshape(-1, s.b[-1]), ws, made)


# ---- batched ----------------------------------------------------------------------------------------


def _batched_blocks(s: QMatMulShape) -> list[tuple[tuple[int, ...], type]]:
    (rows, depth), columns = s.a[-2:], s.b[-1]
    blocks: list[tuple[tuple[int, ...], type]] = [
        ((columns, depth), np.float32),  # B less its zero point, transposed
        ((depth, rows), np.float32),  # A less its zero point, transposed
        ((columns, rows), np.float32),  # a depth chunk's sums
    ]
    return blocks + [((columns, rows), np.int32)] if depth > BATCH_CHUNK else blocks


def _batched_constants(s: QMatMulShape, values: Sequence[Any]) -> dict[str, np.ndarray]:
    """The requantization table per output column (no bias: the zero points are subtracted) and B's
    zero point as a column of float32."""
    a_scale, b_scale, y_scale, y_zero = values[1], values[4], values[6], values[7] if len(values) > 7 else None
    columns = s.b[-1]
    scales = np.broadcast_to(np.asarray(b_scale, np.float64).reshape(-1), (columns,))
    multiplier, shift = qa.quantize_multiplier(_one(a_scale) * scales / _one(y_scale))
    zero = 0 if y_zero is None else int(_one(y_zero))
    b_zero = np.asarray(0 if values[5] is None else values[5], np.float32).reshape(-1)
    return {
        "q_table": channel_table(None, multiplier, shift, zero, *qa.dtype_range(np.dtype(s.dtypes[2])), columns),
        "q_b_zero": np.ascontiguousarray(np.broadcast_to(b_zero, (columns,)).reshape(columns, 1)),
    }


def _batched_run(s: QMatMulShape, values: Sequence[Any], out: np.ndarray, ws: Any, made: dict) -> None:
    a, b = values[0], values[3]
    a_zero = np.float32(0 if values[2] is None else _one(values[2]))
    scratch = Scratch(ws, "QLinearMatMul")
    blocks = [scratch.take(*block) for block in _batched_blocks(s)]
    b_t, a_t, part, acc = blocks[0], blocks[1], blocks[2], blocks[-1]
    depth, table, b_zero = s.a[-1], made["q_table"], made["q_b_zero"]
    batch = out.shape[:-2]
    a_all = a.reshape((1,) * (len(batch) + 2 - a.ndim) + a.shape)
    b_all = b.reshape((1,) * (len(batch) + 2 - b.ndim) + b.shape)
    for index in np.ndindex(*batch):
        a_m = a_all[tuple(i if n > 1 else 0 for i, n in zip(index, a_all.shape[:-2], strict=True))]
        b_m = b_all[tuple(i if n > 1 else 0 for i, n in zip(index, b_all.shape[:-2], strict=True))]
        np.subtract(b_m.T, b_zero, out=b_t, casting="unsafe")
        np.subtract(a_m.T, a_zero, out=a_t, casting="unsafe")
        chunks = range(0, depth, BATCH_CHUNK)
        for k0 in chunks:
            k1 = min(depth, k0 + BATCH_CHUNK)
            np.matmul(b_t[:, k0:k1], a_t[k0:k1], out=part)
            if len(chunks) > 1:
                ACCUMULATE(acc, part, k0 == 0)
        REQUANTIZE(acc if len(chunks) > 1 else part, table, 0, out[index].T)


ROUTES = (
    QMatMulRoute("rows", lambda s: _compiled(s) and len(s.b) == 2,
                 lambda s: gemm_blocks(*s.rows_metas), _rows_constants, _rows_run),
    QMatMulRoute("batched", _compiled, _batched_blocks, _batched_constants, _batched_run, (1, 2, 4, 5, 6, 7)),
    QMatMulRoute("general", lambda s: True),
)  # fmt: skip


@dataclass(frozen=True)
class Example:
    """A QLinearMatMul that takes `route`: A's and B's shapes, their dtype, B's scales per column or
    not, and whether B is a constant (a layer's weights) or an activation."""

    route: str
    a: tuple[int, ...]
    b: tuple[int, ...]
    dtype: Any = np.int8
    per_column: bool = False
    b_constant: bool = True

    def inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Seeded values of the node's 8 inputs: A and B over their dtype's range, scales that keep the
        output spread over its range, a uint8 B with a zero point per column where its scales are."""
        info = np.iinfo(self.dtype)
        a, b = (rng.integers(info.min, info.max + 1, shape).astype(self.dtype) for shape in (self.a, self.b))
        columns, depth = self.b[-1], self.a[-1]
        count = columns if self.per_column else 1
        b_scale = (rng.uniform(0.5, 1.5, count) * 0.02).astype(np.float32)
        zero = 128 if self.dtype == np.uint8 else 0
        b_zero = (rng.integers(100, 156, count) if self.dtype == np.uint8 else np.zeros(count)).astype(self.dtype)
        a_scale, a_zero = np.array(0.05, np.float32), np.array(zero + 3, self.dtype)
        y_scale = np.array(0.13 * np.sqrt(depth), np.float32)  # three standard deviations of the sums: 128 steps
        y_zero = np.array(zero - 2, self.dtype)
        # onnxruntime takes a batched B's scales per column as (..., 1, N)
        shape = () if count == 1 else (count,) if len(self.b) == 2 else (1,) * (len(self.b) - 1) + (count,)
        return [a, a_scale, a_zero, b, b_scale.reshape(shape), b_zero.reshape(shape), y_scale, y_zero]


EXAMPLES = {
    "rows": Example("rows", (6, 40), (40, 12)),
    "rows_per_column_uint8": Example("rows", (2, 5, 24), (24, 10), np.uint8, per_column=True),
    "rows_in_depth_chunks": Example("rows", (8, 600), (600, 8)),
    "rows_few": Example("rows", (1, 64), (64, 10)),  # int32 sums from 16-bit filters: no BLAS
    "batched_attention": Example("batched", (1, 2, 6, 8), (1, 2, 8, 6), b_constant=False),
    "batched_broadcast_uint8": Example(
        "batched", (3, 5, 300), (1, 300, 4), np.uint8, per_column=True, b_constant=False
    ),
    "batched_constant": Example("batched", (2, 4, 16), (2, 16, 5)),
}


# ---- the kernel -------------------------------------------------------------------------------------


def _workspace(inputs, outputs, **_) -> int:
    shape = QMatMulShape.of(inputs, outputs)
    return shape.route.workspace(shape)


def _constants(values, inputs, outputs, **_) -> dict:
    """The chosen route's constants where every input they read (all but A) is constant."""
    shape = QMatMulShape.of(inputs, outputs)
    route = shape.route
    read = [i for i in route.reads if i < len(values) and inputs[i] is not None]
    if route.constants is None or any(values[i] is None for i in read):
        return {}  # the batched route reads B per call: its constants are the scales' and zero points'
    return route.constants(shape, values)


def _bind(inputs, outputs, attrs, general):
    """The chosen route's call, with its constants as prepared (or worked out per call), or None for
    the general route."""
    shape = QMatMulShape.of(inputs, outputs)
    route = shape.route
    run, make = route.run, route.constants
    if run is None or make is None:
        return None

    def call(*values, out, ws=None, **prepared):
        run(shape, values, out, ws, prepared if "q_table" in prepared else make(shape, values))

    return Bound(call, takes_attributes=True)


def _zero(z) -> np.ndarray:
    return np.zeros(1, dtype=np.int64) if z is None else np.asarray(z).astype(np.int64).reshape(-1)


@kernel("QLinearMatMul", workspace=_workspace, constants=_constants, bind=_bind)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None, *, out,
                   ws=None, **_):  # fmt: skip
    """The general route: exact int64 sums (float64 BLAS of 8- or 16-bit values less their zero
    points), then TFLite's requantization; A's and Y's scales and zero points per tensor or per row."""
    a_zero, y_zero = (_per_row(_zero(z)) for z in (a_zero_point, y_zero_point))
    b_zero = _zero(b_zero_point)
    left = a.astype(np.float64) - a_zero
    right = b.astype(np.float64) - (b_zero.astype(np.float64) if b_zero.size > 1 else float(b_zero[0]))
    acc = np.matmul(left, right).astype(np.int64)
    real = _per_row(np.asarray(a_scale, np.float64)) * np.asarray(b_scale, np.float64).reshape(-1)
    multiplier, shift = qa.quantize_multiplier(real / _per_row(np.asarray(y_scale, np.float64)))
    lo, hi = qa.dtype_range(out.dtype)
    out[...] = np.clip(qa.multiply_by_quantized_multiplier(acc, multiplier, shift) + y_zero, lo, hi)


def _per_row(v: np.ndarray) -> np.ndarray:
    """A per-tensor value as one number, a per-row one as a column (rows of A and of the output)."""
    return v.reshape(-1, 1) if v.size > 1 else v.reshape(-1)[:1]
