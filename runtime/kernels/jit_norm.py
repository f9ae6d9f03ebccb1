"""Compiled LayerNormalization in float32: one loop per row, the row read three times while it
is in cache (the sum, the squared deviations, the scaled write) where numpy makes about eight
passes over the whole tensor (`runtime.kernels.norm`'s route, kept for other dtypes and shapes).

Statistics are accumulated in float64, so they are at least as accurate as the float32
statistics of the spec's stash_type 1; NaN and infinities propagate as in the formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.kernels._jit import compiled, numba


def _layer_norm_py(x, y, scale, bias, has_bias, mean, inv_std, epsilon):
    """Rows of `x` (rows, cols) normalised into `y`, times `scale` (cols,) plus `bias` (cols,)
    when `has_bias`; each row's mean and 1 / sqrt(variance + epsilon) into `mean` and `inv_std`."""
    rows, cols = x.shape
    for i in range(rows):
        xi, yi = x[i], y[i]
        total = 0.0
        for j in range(cols):
            total += xi[j]
        m = total / max(cols, 1)
        squares = 0.0
        for j in range(cols):
            d = xi[j] - m
            squares += d * d
        inv = 1.0 / math.sqrt(squares / max(cols, 1) + epsilon)
        m32, inv32 = np.float32(m), np.float32(inv)
        mean[i], inv_std[i] = m32, inv32
        if has_bias:
            for j in range(cols):
                yi[j] = (xi[j] - m32) * inv32 * scale[j] + bias[j]
        else:
            for j in range(cols):
                yi[j] = (xi[j] - m32) * inv32 * scale[j]


layer_norm_loop = compiled(_layer_norm_py)
_ready = False


def _signature() -> tuple:
    t = numba.types
    f32 = t.float32
    rows_in, rows_out = t.Array(f32, 2, "C", readonly=True), t.Array(f32, 2, "C")
    vector_in, vector_out = t.Array(f32, 1, "C", readonly=True), t.Array(f32, 1, "C")
    return (rows_in, rows_out, vector_in, vector_in, t.boolean, vector_out, vector_out, t.float64)


def prepared() -> Callable[..., None] | None:
    """The compiled loop (looked up when called, so that tests can take it away), compiled for
    its one signature now if it was not yet: the kernel's workspace function calls this, so
    that the session compiles when it prepares and no run pays for it."""
    global _ready
    loop: Any = layer_norm_loop
    if loop is None:
        return None
    if not _ready:
        loop.disable_compile(False)
        loop.compile(_signature())
        loop.disable_compile(True)
        _ready = True
    return loop


def usable(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, cols: int) -> bool:
    """Whether the compiled loop takes these operands: float32, C-contiguous, one scale (and
    bias) value per normalised element."""
    operands = [x, y, scale] + ([] if bias is None else [bias])
    return (
        layer_norm_loop is not None
        and all(a.dtype == np.float32 and a.flags.c_contiguous for a in operands)
        and scale.size == cols
        and (bias is None or bias.size == cols)
    )
