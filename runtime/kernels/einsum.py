"""Einsum: numpy's einsum, which speaks the same equation language as ONNX."""

from __future__ import annotations

import numpy as np

from runtime.kernels import kernel


@kernel("Einsum")
def einsum(*inputs, out, equation):
    equation = equation.replace(" ", "")  # ONNX allows spaces around terms; numpy does not
    # With two or more operands, let numpy route contractions through BLAS (tensordot): far
    # faster than its element loop, at the price of a temporary as large as the result.
    optimize = "greedy" if len(inputs) > 1 else False
    if any(x.dtype.kind == "V" for x in inputs):
        # Extension floats (bfloat16) have no einsum loops: compute in float32, round once.
        wide = [x.astype(np.float32) for x in inputs]
        out[...] = np.einsum(equation, *wide, optimize=optimize)
        return
    np.einsum(equation, *inputs, out=out, optimize=optimize)
