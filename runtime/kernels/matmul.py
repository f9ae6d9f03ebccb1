"""MatMul and Gemm: one BLAS call writing into the output, then in-place scaling and bias;
MatMulInteger through int32 copies in the workspace.

A float32 Gemm of a few rows (a classifier at batch 1: 1 x 576 by 576 x 1024) is a
matrix-vector product bound by reading B from memory, which is cold by then. OpenBLAS's
sgemv reads B as several interleaved streams; a compiled loop reading B once, front to back,
one row after another (a dot product per row of a transposed B, a scaled row added per row
of B otherwise), with alpha and the bias applied as each output is written, took 0.5x to
0.7x its time on MobileNetV3's two Gemms with B out of cache (measured single-threaded).
"""

from __future__ import annotations

import functools

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._jit import compiled
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers


@kernel("MatMul")
def matmul(a, b, *, out, rows=None):
    # numpy's matmul follows the same rules as ONNX: batch broadcasting, 1-D operands
    # promoted and their axis removed from the result.
    if rows is not None:  # the region hook: rows [r0, r1) of the product, from those rows of a (a view)
        a = a[..., rows[0] : rows[1], :]
    np.matmul(a, b, out=out)


def _gemm_prepare(*_: object, **__: object) -> None:
    _warm()


@kernel("Gemm", prepare=_gemm_prepare)
@small_ufunc_buffers()
def gemm(a, b, c=None, *, out, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    # `broadcast` (Gemm before opset 7) only allowed what numpy's broadcasting does anyway.
    left = a.T if transA else a
    if out.shape[0] <= FEW_ROWS and _few_rows(left, b, c, out, beta):
        _gemm_rows_compiled(left, b, c, out, float(alpha), float(beta), bool(transB))
        return
    np.matmul(left, b.T if transB else b, out=out)
    if alpha != 1.0:
        out *= out.dtype.type(alpha)
    if c is None or beta == 0.0:
        return
    if beta == 1.0:
        out += c
    else:
        # C is a bias (a vector or a small matrix at most as large as Y): scaling a copy is cheap.
        out += c * out.dtype.type(beta)


# Rows of A up to which the compiled loop runs: each row of B is read once for all of them,
# and A's rows stay in cache; more rows are BLAS's work (sgemm).
FEW_ROWS = 16
F32 = np.dtype(np.float32)


def _few_rows(left, b, c, out, beta: float) -> bool:
    """Whether the compiled loop takes this Gemm: float32, A's rows and B contiguous, a bias
    (if any, and beta not 0) of one value or one row of N."""
    if _rows_dot is None or not (left.dtype == b.dtype == out.dtype == F32):
        return False
    if not (left.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous):
        return False
    if c is None or beta == 0.0:
        return True
    return c.dtype == F32 and (c.size == 1 or (c.size == out.shape[1] and c.shape[-1] == c.size))


def _gemm_rows_compiled(left, b, c, out, alpha: float, beta: float, trans_b: bool) -> None:
    assert _rows_dot is not None and _rows_axpy is not None
    if c is None or beta == 0.0:
        bias, kind = _EMPTY, 0
    else:
        bias, kind = _read_only(c.reshape(-1)), 1 if c.size == 1 and out.shape[1] != 1 else 2
    loop = _rows_dot if trans_b else _rows_axpy
    loop(_read_only(left), _read_only(b), bias, kind, alpha, beta, out)


def _read_only(x: np.ndarray) -> np.ndarray:
    """`x`, or a read-only view of it: the loops are compiled for read-only inputs (a
    session's tensors and constants are), so that one compilation serves every call."""
    if not x.flags.writeable:
        return x
    view = x.view()
    view.flags.writeable = False
    return view


_EMPTY = np.zeros(1, F32)
_EMPTY.flags.writeable = False


def _finish(acc, n, bias, kind, alpha, beta):  # type: ignore[no-untyped-def]
    """alpha * acc plus beta times the bias of column n (kind 0: none, 1: one value, 2: a row)."""
    y = np.float32(alpha) * acc
    if kind == 1:
        y += np.float32(beta) * bias[0]
    elif kind == 2:
        y += np.float32(beta) * bias[n]
    return y


def _dot_rows(a, w, bias, kind, alpha, beta, out):  # type: ignore[no-untyped-def]
    """out = alpha * a @ w.T + beta * bias for a (M, K), w (N, K): w read row after row."""
    rows, depth = a.shape
    for n in range(w.shape[0]):
        row = w[n]
        for m in range(rows):
            x = a[m]
            acc = np.float32(0.0)
            for k in range(depth):
                acc += row[k] * x[k]
            out[m, n] = _finish(acc, n, bias, kind, alpha, beta)


def _axpy_rows(a, w, bias, kind, alpha, beta, out):  # type: ignore[no-untyped-def]
    """out = alpha * a @ w + beta * bias for a (M, K), w (K, N): w read row after row, each
    added into every output row scaled by A's entry."""
    rows, depth = a.shape
    columns = w.shape[1]
    for m in range(rows):
        y = out[m]
        for n in range(columns):
            y[n] = np.float32(0.0)
    for k in range(depth):
        row = w[k]
        for m in range(rows):
            x = a[m, k]
            y = out[m]
            for n in range(columns):
                y[n] += x * row[n]
    for m in range(rows):
        y = out[m]
        for n in range(columns):
            y[n] = _finish(y[n], n, bias, kind, alpha, beta)


_finish = compiled(_finish, inline=True) or _finish
_rows_dot = compiled(_dot_rows)
_rows_axpy = compiled(_axpy_rows)


@functools.cache
def _warm() -> None:
    """Compile the loops (or load them from numba's cache) on tiny calls, at prepare."""
    if _rows_dot is None or _rows_axpy is None:
        return
    a, w, bias = (_read_only(np.ones(shape, F32)) for shape in ((1, 2), (2, 2), (2,)))
    for loop in (_rows_dot, _rows_axpy):
        for c in (_EMPTY, bias):
            loop(a, w, c, 0, 1.0, 1.0, np.empty((1, 2), F32))


def _widened(meta_or_array) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(meta_or_array.shape), np.dtype(np.int32)


def matmul_integer_workspace(inputs, outputs, **_) -> int:
    return scratch_bytes(_widened(inputs[0]), _widened(inputs[1]))


@kernel("MatMulInteger", workspace=matmul_integer_workspace)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None, *, out, ws):
    # (A - a_zero) @ (B - b_zero) in int32: the zero points are removed in workspace copies.
    # a_zero_point may be per row of A (1-D, length M), b_zero_point per column of B.
    scratch = Scratch(ws, "MatMulInteger")
    a32 = scratch.take(a.shape, np.int32)
    b32 = scratch.take(b.shape, np.int32)
    a_zero = 0 if a_zero_point is None else a_zero_point.astype(np.int32)
    if np.ndim(a_zero) == 1 and a.ndim >= 2:
        a_zero = a_zero[:, None]
    np.subtract(a, a_zero, out=a32, dtype=np.int32)
    np.subtract(b, 0 if b_zero_point is None else b_zero_point.astype(np.int32), out=b32, dtype=np.int32)
    np.matmul(a32, b32, out=out)
