"""Compiled activations: one pass over memory where numpy takes several (`runtime.kernels._jit`).

An activation is a code and two parameters (`spec`), so that a compiled loop that has just
computed a row (a depthwise Conv's, `runtime.kernels.jit_depthwise`) applies it before the
row leaves the cache, and a standalone or fused activation runs as one loop (`activate`).
Each loop branches on the code outside its inner loop, so every inner loop vectorises.

exp comes from a polynomial for 2^f on [-1/2, 1/2] scaled by 2^k built from its exponent
bits (numba has no vectorised exp without Intel's SVML): within 1.3e-6 relative of float32's
exp over the range where it is normal; results below 2^-126 are flushed to 0, overflow gives
inf and NaN stays NaN. Float32 only: other dtypes keep their numpy routes.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from runtime.kernels._jit import ENABLED, FASTMATH, compiled, numba
from runtime.kernels._scratch import same_start

NONE, RELU, CLIP, HARD_SIGMOID, HARD_SWISH, SIGMOID, SILU = range(7)
CODES = {
    "Relu": RELU,
    "Clip": CLIP,
    "HardSigmoid": HARD_SIGMOID,
    "HardSwish": HARD_SWISH,
    "Sigmoid": SIGMOID,
    "Silu": SILU,
}
DTYPE = np.dtype(np.float32)  # the one dtype the compiled loops take


def spec(
    name: str, *, lo: float = -math.inf, hi: float = math.inf, alpha: float = 0.2, beta: float = 0.5
) -> tuple[int, float, float]:
    """(code, p0, p1) of activation `name` (a key of `CODES`, or "" for none): Clip's bounds,
    HardSigmoid's alpha and beta; the other activations take no parameter."""
    code = CODES[name] if name else NONE
    if code == CLIP:
        return code, float(lo), float(hi)
    if code == HARD_SIGMOID:
        return code, float(alpha), float(beta)
    return code, 0.0, 0.0


def usable(*arrays: np.ndarray) -> bool:
    """Whether the compiled loops take these arrays: compiled loops on, float32, C-contiguous."""
    return activate is not None and all(a.dtype == DTYPE and a.flags.c_contiguous for a in arrays)


if ENABLED:
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def _float_of_bits(typingctx, bits):  # type: ignore[no-untyped-def]
        """The float32 whose IEEE bits are the int32 `bits` (a bit cast, vectorisable)."""

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(types.int32), codegen

    def _exp2(t):  # type: ignore[no-untyped-def]
        """2^t for float32 t: 2^k from the exponent bits of k, 2^f from a degree-6 polynomial."""
        c = t if t > np.float32(-127.0) else np.float32(-127.0)  # NaN: restored at the end
        c = c if c < np.float32(128.0) else np.float32(128.0)  # k = 255: inf
        k = np.int32(c + np.float32(127.5))  # round(c) + 127, in [0, 255]
        f = c - np.float32(k - np.int32(127))
        p = np.float32(1.535336188319500e-4)
        p = p * f + np.float32(1.339887440266574e-3)
        p = p * f + np.float32(9.618437357674640e-3)
        p = p * f + np.float32(5.550332471162809e-2)
        p = p * f + np.float32(2.402264791363012e-1)
        p = p * f + np.float32(6.931472028550421e-1)
        p = p * f + np.float32(1.0)
        r = p * _float_of_bits(k << np.int32(23))
        return r if t == t else t

    exp2 = numba.njit(inline="always", fastmath=FASTMATH, cache=True)(_exp2)
else:
    exp2 = None

_MINUS_LOG2E = np.float32(-math.log2(math.e))


def _apply(src, dst, n, code, p0, p1):  # type: ignore[no-untyped-def]
    """dst[:n] = activation(src[:n]), src and dst apart (one array in place: `_apply_in_place`,
    whose loops vectorise where the compiler would otherwise fall back to scalar code for
    arrays it cannot prove apart). Comparisons are written so that NaN passes through as
    numpy's clip and maximum let it."""
    if code == NONE:
        for i in range(n):
            dst[i] = src[i]
    elif code == RELU:
        for i in range(n):
            dst[i] = _relu(src[i])
    elif code == CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
        for i in range(n):
            dst[i] = _clip(src[i], lo, hi)
    elif code == HARD_SIGMOID:
        alpha, beta = np.float32(p0), np.float32(p1)
        for i in range(n):
            dst[i] = _clip(alpha * src[i] + beta, np.float32(0.0), np.float32(1.0))
    elif code == HARD_SWISH:
        for i in range(n):
            dst[i] = _hard_swish(src[i])
    elif code == SIGMOID:
        for i in range(n):
            dst[i] = _sigmoid(src[i])
    else:  # SILU
        for i in range(n):
            dst[i] = _silu(src[i])


def _apply_in_place(y, code, p0, p1):  # type: ignore[no-untyped-def]
    """y = activation(y), as `_apply`."""
    n = y.size
    if code == RELU:
        for i in range(n):
            y[i] = _relu(y[i])
    elif code == CLIP:
        lo, hi = np.float32(p0), np.float32(p1)
        for i in range(n):
            y[i] = _clip(y[i], lo, hi)
    elif code == HARD_SIGMOID:
        alpha, beta = np.float32(p0), np.float32(p1)
        for i in range(n):
            y[i] = _clip(alpha * y[i] + beta, np.float32(0.0), np.float32(1.0))
    elif code == HARD_SWISH:
        for i in range(n):
            y[i] = _hard_swish(y[i])
    elif code == SIGMOID:
        for i in range(n):
            y[i] = _sigmoid(y[i])
    elif code == SILU:
        for i in range(n):
            y[i] = _silu(y[i])


if ENABLED:
    _inline = numba.njit(inline="always", fastmath=FASTMATH, cache=True)

    @_inline
    def _relu(v):  # type: ignore[no-untyped-def]
        return np.float32(0.0) if v < np.float32(0.0) else v

    @_inline
    def _clip(v, lo, hi):  # type: ignore[no-untyped-def]
        v = lo if v < lo else v
        return hi if v > hi else v

    @_inline
    def _hard_swish(v):  # type: ignore[no-untyped-def]
        return v * _clip(v * np.float32(1.0 / 6.0) + np.float32(0.5), np.float32(0.0), np.float32(1.0))

    @_inline
    def _sigmoid(v):  # type: ignore[no-untyped-def]
        return np.float32(1.0) / (np.float32(1.0) + exp2(v * _MINUS_LOG2E))

    @_inline
    def _silu(v):  # type: ignore[no-untyped-def]
        return v / (np.float32(1.0) + exp2(v * _MINUS_LOG2E))


# The row finisher the depthwise loop calls, and the in-place pass over a whole array.
activate_row = compiled(_apply)
activate = compiled(_apply_in_place)


def run(spec_: tuple[int, float, float], src: np.ndarray, dst: np.ndarray) -> None:
    """dst = activation(src) through the compiled loops (both float32, C-contiguous, one
    shape; dst may be src)."""
    assert activate is not None and activate_row is not None
    code, p0, p1 = spec_
    if same_start(src, dst):
        activate(dst.reshape(-1), code, p0, p1)
    else:
        activate_row(src.reshape(-1), dst.reshape(-1), dst.size, code, p0, p1)


@functools.cache
def warm() -> None:
    """Compile the loops (or load them from numba's cache) now, on a tiny call, so that no
    compilation falls in a run: kernels call this at prepare."""
    if activate is None or activate_row is None:
        return
    y = np.zeros(4, DTYPE)
    activate(y, SILU, 0.0, 0.0)
    activate_row(y, np.empty_like(y), y.size, SILU, 0.0, 0.0)
