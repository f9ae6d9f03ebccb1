"""MatMul and Gemm: one BLAS call writing into the output, then in-place scaling and bias."""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel


@kernel("MatMul")
def matmul(a, b, *, out):
    # numpy's matmul follows the same rules as ONNX: batch broadcasting, 1-D operands
    # promoted and their axis removed from the result.
    np.matmul(a, b, out=out)


@kernel("Gemm")
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
