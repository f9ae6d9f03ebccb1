"""MatMul and Gemm: one BLAS call writing into the output, then in-place scaling and bias;
MatMulInteger through int32 copies in the workspace."""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers


@kernel("MatMul")
def matmul(a, b, *, out):
    # numpy's matmul follows the same rules as ONNX: batch broadcasting, 1-D operands
    # promoted and their axis removed from the result.
    np.matmul(a, b, out=out)


@kernel("Gemm")
@small_ufunc_buffers()
def gemm(a, b, c=None, *, out, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    # `broadcast` (Gemm before opset 7) only allowed what numpy's broadcasting does anyway.
    np.matmul(a.T if transA else a, b.T if transB else b, out=out)
    if alpha != 1.0:
        out *= out.dtype.type(alpha)
    if c is None or beta == 0.0:
        return
    if beta == 1.0:
        out += c
    else:
        # C is a bias (a vector or a small matrix at most as large as Y): scaling a copy is cheap.
        out += c * out.dtype.type(beta)


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
