"""Compiled LayerNormalization and RMSNormalization in float32: one loop per row, the row read
while it is in cache (LayerNormalization: the sum, the squared deviations, the scaled write),
where numpy makes several passes over the whole tensor (`runtime.kernels.norm`'s routes, kept
for other dtypes and shapes).

Statistics are accumulated in float64, so they are at least as accurate as the float32
statistics of the spec's stash_type 1; NaN and infinities propagate as in the formula.
"""

from __future__ import annotations

import math
import threading
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


def _rms_norm_py(x, y, scale, epsilon):
    """Rows of `x` (rows, cols) divided by their root mean square (plus `epsilon` under the
    root) into `y`, times `scale` (cols,)."""
    rows, cols = x.shape
    for i in range(rows):
        xi, yi = x[i], y[i]
        squares = 0.0
        for j in range(cols):
            v = np.float64(xi[j])
            squares += v * v
        inv32 = np.float32(1.0 / math.sqrt(squares / max(cols, 1) + epsilon))
        for j in range(cols):
            yi[j] = xi[j] * inv32 * scale[j]


rms_norm_loop = compiled(_rms_norm_py)
_READY: set[str] = set()
_COMPILING = threading.Lock()


def _signature(name: str) -> tuple:
    t = numba.types
    f32 = t.float32
    rows_in, rows_out = t.Array(f32, 2, "C", readonly=True), t.Array(f32, 2, "C")
    vector_in, vector_out = t.Array(f32, 1, "C", readonly=True), t.Array(f32, 1, "C")
    if name == "rms_norm_loop":
        return (rows_in, rows_out, vector_in, t.float64)
    return (rows_in, rows_out, vector_in, vector_in, t.boolean, vector_out, vector_out, t.float64)


def prepared(name: str = "layer_norm_loop") -> Callable[..., None] | None:
    """The compiled loop `name` of this module (looked up when called, so that tests can take
    it away), compiled for its one signature now if it was not yet: the kernels' workspace
    functions call this, so that the session compiles when it prepares and no run pays for it."""
    loop: Any = globals()[name]
    if loop is None:
        return None
    with _COMPILING:  # sessions may prepare in several threads at once
        if name not in _READY:
            loop.disable_compile(False)
            loop.compile(_signature(name))
            loop.disable_compile(True)
            _READY.add(name)
    return loop


F32 = np.dtype(np.float32)


def layer_norm_last_axis(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, ws: np.ndarray | None,
                         axis: int, epsilon: float) -> bool:  # fmt: skip
    """LayerNormalization of `x` over its last axis into `y` by the compiled loop, its row
    statistics in the front of `ws`, when the loop takes these operands; else False, and
    nothing written. Few Python steps on purpose: the kernel runs right after a BLAS call
    has pushed the interpreter's own data out of the caches, where each step costs about a
    microsecond (this route took 0.55x the time of the general one's Python around the loop)."""
    loop = layer_norm_loop
    if loop is None or ws is None or "layer_norm_loop" not in _READY or (axis != -1 and axis != x.ndim - 1):
        return False
    cols = x.shape[-1]
    if not (x.dtype == y.dtype == scale.dtype == F32 and scale.size == cols and x.flags.c_contiguous):
        return False
    if not (y.flags.c_contiguous and scale.flags.c_contiguous):
        return False
    if bias is None:
        bias = scale
    elif not (bias.dtype == F32 and bias.size == cols and bias.flags.c_contiguous):
        return False
    rows = x.size // max(cols, 1)
    stats = ws[: 8 * rows].view(F32)  # the workspace's first two blocks (mean, 1 / std) hold them
    loop(x.reshape(rows, cols), y.reshape(rows, cols), scale.reshape(cols), bias.reshape(cols), bias is not scale,
         stats[:rows], stats[rows:], float(epsilon))  # fmt: skip
    return True


def usable(x: np.ndarray, y: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, cols: int,
           name: str = "layer_norm_loop") -> bool:  # fmt: skip
    """Whether the compiled loop `name` takes these operands: float32, C-contiguous, one scale
    (and bias) value per normalised element."""
    operands = [x, y, scale] + ([] if bias is None else [bias])
    return (
        globals()[name] is not None
        and all(a.dtype == np.float32 and a.flags.c_contiguous for a in operands)
        and scale.size == cols
        and (bias is None or bias.size == cols)
    )
