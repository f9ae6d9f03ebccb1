"""QGemm's compiled route, for a constant B and an 8-bit output (the classifiers onnxruntime's quantizer
writes): the filter ``B - b_zero`` as float32 rows per output column, the bias folded with A's zero
point, and the depth chunks that keep float32 sums exact, made once per node (`qgemm_constants`);
each call casts A's rows to float32 columns in the workspace, multiplies them by float32 BLAS a
depth chunk at a time (summed in int32) and requantizes in one compiled pass, as QLinearConv's gemm
route does (`runtime.kernels.quantized.qlinear_routes`, where the exactness is argued). A of at most
`DENSE_ROWS` rows (a classifier's one image) takes `jit_qlinear.DENSE` instead: int32 sums straight
from the 8-bit rows and the filter as 16-bit rows, no workspace; the same integers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import quant_arith as qa
from runtime.kernels._scratch import Scratch, scratch_bytes
from runtime.kernels.quantized.jit_conv_int import channel_table
from runtime.kernels.quantized.jit_qlinear import ACCUMULATE, DENSE, REQUANTIZE
from runtime.kernels.quantized.qlinear_routes import EXACT, depth_chunks


def _eight_bit(meta: Any) -> bool:
    return meta is not None and np.dtype(meta.dtype).kind in "iu" and np.dtype(meta.dtype).itemsize == 1


def takes(inputs: Sequence[Any], outputs: Sequence[Any], transA: int = 0) -> bool:
    """Whether a QGemm of these metas runs compiled: 8-bit A and output, A not transposed, 2-D."""
    on = REQUANTIZE is not None and ACCUMULATE is not None
    y_scale = inputs[7] if len(inputs) > 7 else None
    return on and not transA and y_scale is not None and _eight_bit(inputs[0]) and _eight_bit(outputs[0]) \
        and len(inputs[0].shape) == 2  # fmt: skip


DENSE_ROWS = 4  # rows of A up to which int32 sums from 16-bit filters beat casting them for float32 BLAS


def dense(inputs: Sequence[Any]) -> bool:
    """Whether A's few rows take `jit_qlinear.DENSE` (its int32 sums exact: depth x 255 x 255 within them)."""
    (rows, depth) = inputs[0].shape
    return DENSE is not None and rows <= DENSE_ROWS and depth * 255 * 255 < 1 << 31


def gemm_blocks(inputs: Sequence[Any], outputs: Sequence[Any]) -> list[tuple[tuple[int, int], type]]:
    """The workspace blocks of a 2-D A: its float32 columns, the sums, and int32 sums where the depth
    may need more than one exact chunk (none for `dense`'s few rows)."""
    if dense(inputs):
        return []
    (rows, depth), columns = inputs[0].shape, outputs[0].shape[1]
    blocks: list[tuple[tuple[int, int], type]] = [((depth, rows), np.float32), ((columns, rows), np.float32)]
    x_max = max(abs(v) for v in qa.dtype_range(np.dtype(inputs[0].dtype)))
    return blocks + [((columns, rows), np.int32)] if depth * x_max * 255 > EXACT else blocks


def qgemm_workspace(inputs: Sequence[Any], outputs: Sequence[Any], transA: int = 0, **_: Any) -> int:
    return scratch_bytes(*gemm_blocks(inputs, outputs)) if takes(inputs, outputs, transA) else 0


def _one(v: Any) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def qgemm_constants(values: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any], *, alpha: float = 1.0,
                    transA: int = 0, transB: int = 0, **_: Any) -> dict[str, np.ndarray]:  # fmt: skip
    """The filter rows, folded bias, requantization table and depth chunks, where B and every scale and
    zero point are constants."""
    if not takes(inputs, outputs, transA) or any(
        v is None for v, m in zip(values[1:], inputs[1:], strict=True) if m is not None
    ):
        return {}
    b = values[3].T if transB else values[3]  # (depth, columns)
    b_zero = np.asarray(0 if values[5] is None else values[5]).astype(np.float32).reshape(-1)
    filters = np.ascontiguousarray((b.astype(np.float32) - b_zero).T)  # (columns, depth)
    columns = filters.shape[0]
    bias = np.zeros(columns, np.int64) if values[6] is None else np.asarray(values[6], np.int64).reshape(-1)
    a_zero = 0 if values[2] is None else int(_one(values[2]))
    folded = np.broadcast_to(bias, (columns,)) - a_zero * filters.astype(np.int64).sum(axis=1)
    scales = float(alpha) * _one(values[1]) * np.asarray(values[4], np.float64).reshape(-1)
    multiplier, shift = qa.quantize_multiplier(np.broadcast_to(scales / _one(values[7]), (columns,)))
    zero = 0 if len(values) < 9 or values[8] is None else int(_one(values[8]))
    x_max = max(abs(v) for v in qa.dtype_range(np.dtype(inputs[0].dtype)))
    table = channel_table(folded, multiplier, shift, zero, *qa.dtype_range(outputs[0].dtype), columns)
    if dense(inputs):
        return {"q_rows": filters.astype(np.int16), "q_table": table}
    return {"q_filters": filters, "q_table": table, "q_chunks": depth_chunks(filters, x_max)}


def qgemm_run(a: np.ndarray, out: np.ndarray, ws: np.ndarray | None, made: dict[str, np.ndarray]) -> None:
    """``out = requantize(a @ filters.T)``: A's rows as float32 columns, BLAS per depth chunk (or a few
    rows' int32 sums from the 16-bit filters)."""
    if "q_rows" in made:
        DENSE(a, made["q_rows"], made["q_table"], out)
        return
    filters, table, chunks = made["q_filters"], made["q_table"], made["q_chunks"]
    scratch = Scratch(ws, "QGemm")
    blocks = [scratch.take(*block) for block in gemm_blocks([a], [out])]
    columns, part, acc = blocks[0], blocks[1], blocks[-1]
    if chunks.size > 2 and len(blocks) < 3:
        raise ValueError(f"QGemm: {chunks.size - 1} depth chunks where the workspace holds one")
    np.copyto(columns, a.T, casting="unsafe")
    for i in range(chunks.size - 1):
        k0, k1 = chunks[i], chunks[i + 1]
        np.matmul(filters[:, k0:k1], columns[k0:k1], out=part)
        if chunks.size > 2:
            ACCUMULATE(acc, part, i == 0)
    REQUANTIZE(acc if chunks.size > 2 else part, table, 0, out.T)
