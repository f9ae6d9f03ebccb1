"""Compiled activations: one pass over memory where numpy takes several (`runtime.kernels._jit`).

An activation is a code and two parameters (`spec`), so that a compiled loop that has just
computed a row (a depthwise Conv's, `runtime.kernels.conv.jit_depthwise`) applies it before the
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

from runtime.kernels._jit import ENABLED, compiled, float32_of_bits
from runtime.kernels._scratch import same_start

NONE, RELU, CLIP, HARD_SIGMOID, HARD_SWISH, SIGMOID, SILU, GELU, GELU_TANH, TANH = range(10)
CODES = {
    "Relu": RELU,
    "Clip": CLIP,
    "HardSigmoid": HARD_SIGMOID,
    "HardSwish": HARD_SWISH,
    "Sigmoid": SIGMOID,
    "Silu": SILU,
    "Gelu": GELU,  # exact (erf), by Abramowitz-Stegun 7.1.26 as the numpy route
    "GeluTanh": GELU_TANH,
    "Tanh": TANH,
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

    def _pow2_fraction_py(f):  # type: ignore[no-untyped-def]
        """2^f for f in [-1/2, 1/2]: the degree-6 polynomial."""
        p = np.float32(1.535336188319500e-4)
        p = p * f + np.float32(1.339887440266574e-3)
        p = p * f + np.float32(9.618437357674640e-3)
        p = p * f + np.float32(5.550332471162809e-2)
        p = p * f + np.float32(2.402264791363012e-1)
        p = p * f + np.float32(6.931472028550421e-1)
        return p * f + np.float32(1.0)

    _pow2_fraction = compiled(_pow2_fraction_py, inline=True)

    def _exp2(t):  # type: ignore[no-untyped-def]
        """2^t for float32 t: 2^k from the exponent bits of k = round(t), 2^f from a degree-6
        polynomial. Integer arithmetic stays in 32 bits (numba widens int32 - int32 to int64,
        which halves the lanes of a vectorised loop: Sigmoid, SiLU and Softmax took 0.7-0.75x
        the time with it narrow). NaN stays NaN, past 128 gives inf, below -127 gives 0."""
        c = t if t > np.float32(-127.0) else np.float32(-127.0)
        c = c if c < np.float32(128.0) else np.float32(128.0)
        whole = np.floor(c + np.float32(0.5))
        bits = (np.int32(whole) + np.int32(127)) << np.int32(23)
        r = _pow2_fraction(c - whole) * float32_of_bits(bits)
        return r if t == t else t

    exp2 = compiled(_exp2, inline=True)
else:
    exp2 = None

_MINUS_LOG2E = np.float32(-math.log2(math.e))
_LOG2E = np.float32(math.log2(math.e))
# Abramowitz & Stegun 7.1.26 (the numpy route's Gelu): erf(z) ~ 1 - t P(t) exp(-z^2), t = 1 / (1 + p z)
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_K = math.sqrt(2.0 / math.pi)


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
    elif code == SILU:
        for i in range(n):
            dst[i] = _silu(src[i])
    elif code == GELU:
        for i in range(n):
            dst[i] = _gelu(src[i])
    elif code == GELU_TANH:
        for i in range(n):
            dst[i] = _gelu_tanh(src[i])
    elif code == TANH:
        for i in range(n):
            dst[i] = _tanh(src[i])


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
    elif code == GELU:
        for i in range(n):
            y[i] = _gelu(y[i])
    elif code == GELU_TANH:
        for i in range(n):
            y[i] = _gelu_tanh(y[i])
    elif code == TANH:
        for i in range(n):
            y[i] = _tanh(y[i])


def inline(fn):  # type: ignore[no-untyped-def]
    """`fn` compiled to be inlined into the compiled loops that call it, or None when compiled
    loops are off."""
    return compiled(fn, inline=True)


if ENABLED:
    _inline = inline

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

    @_inline
    def _gelu(v):  # type: ignore[no-untyped-def]
        # x Phi(x) = relu(x) - |x| e^(-x^2/2) t P(t) / 2, t = 1 / (1 + p |x| / sqrt 2), as the
        # numpy route (`runtime.kernels.activation`); +inf gives inf, -inf NaN (x * 0), as x Phi(x).
        a = abs(v)
        t = np.float32(1.0) / (np.float32(1.0) + np.float32(_AS_P / math.sqrt(2.0)) * a)
        c = np.float32(_AS_A[4] / 2) * t + np.float32(_AS_A[3] / 2)
        c = c * t + np.float32(_AS_A[2] / 2)
        c = c * t + np.float32(_AS_A[1] / 2)
        c = c * t + np.float32(_AS_A[0] / 2)
        c = c * t
        r = _relu(v) - c * a * exp2(v * v * np.float32(-0.5 * math.log2(math.e)))
        return v if v == np.float32(np.inf) else r

    @_inline
    def _gelu_tanh(v):  # type: ignore[no-untyped-def]
        # x (1 + tanh(z)) / 2 = x / (1 + e^(-2z)), z = sqrt(2 / pi) (x + 0.044715 x^3)
        z = v * (np.float32(_K) + np.float32(_K * 0.044715) * v * v)
        return v / (np.float32(1.0) + exp2(z * np.float32(-2.0 * math.log2(math.e))))

    @_inline
    def _tanh(v):  # type: ignore[no-untyped-def]
        # 1 - 2 / (e^(2x) + 1): +-1 at the ends, NaN stays NaN
        return np.float32(1.0) - np.float32(2.0) / (exp2(v * np.float32(2.0 * math.log2(math.e))) + np.float32(1.0))


def _ordered(bits):  # type: ignore[no-untyped-def]
    """The int32 whose order is the float32 order of the float with these bits (and back: the
    map is its own inverse): negatives have their other 31 bits flipped. int32 throughout, as
    numba widens int32 arithmetic to int64, which halves the vector lanes."""
    return np.int32(bits ^ np.int32(np.int32(bits >> np.int32(31)) & np.int32(0x7FFFFFFF)))


def _row_max(y):  # type: ignore[no-untyped-def]
    """The largest of y (a non-empty row) as the largest of its ordered integers
    (`_ordered`), a reduction the compiler vectorises, where a float maximum stays one lane
    wide without a no-NaN promise: 0.35x the time of eight running float maxima on 197-wide
    rows. A NaN gives a NaN or a value of the row; either way the exponentials make its row
    NaN, as numpy's route does."""
    bits = y.view(np.int32)
    top = np.int32(-2147483648)
    for i in range(bits.size):
        top = max(top, _ordered(bits[i]))
    return float32_of_bits(_ordered(top))


def _softmax_rows(src, dst, log):  # type: ignore[no-untyped-def]
    """dst = (Log)Softmax(src) along each row of 2-D arrays apart: the row's maximum, then its
    exponentials (stored, for Softmax) and their sum, then the scaling, each row in cache."""
    for r in range(src.shape[0]):
        x, y = src[r], dst[r]
        m = _row_max(x)
        total = np.float32(0.0)
        if log:
            for i in range(x.size):
                total += exp2((x[i] - m) * _LOG2E)
            # (x - m) - lse in two loops: in one, the compiler may reassociate it to
            # x - (m + lse), which loses the digits of results near 0.
            lse = np.log(total)
            for i in range(x.size):
                y[i] = x[i] - m
            for i in range(x.size):
                y[i] -= lse
        else:
            for i in range(x.size):
                e = exp2((x[i] - m) * _LOG2E)
                y[i] = e
                total += e
            scale = np.float32(1.0) / total
            for i in range(x.size):
                y[i] *= scale


def _softmax_rows_in_place(y2, log):  # type: ignore[no-untyped-def]
    """`_softmax_rows` over one array, in place."""
    for r in range(y2.shape[0]):
        y = y2[r]
        m = _row_max(y)
        total = np.float32(0.0)
        if log:
            for i in range(y.size):
                total += exp2((y[i] - m) * _LOG2E)
            lse = np.log(total)
            for i in range(y.size):
                y[i] -= m
            for i in range(y.size):
                y[i] -= lse
        else:
            for i in range(y.size):
                e = exp2((y[i] - m) * _LOG2E)
                y[i] = e
                total += e
            scale = np.float32(1.0) / total
            for i in range(y.size):
                y[i] *= scale


_ordered = inline(_ordered) or _ordered
_row_max = inline(_row_max) or _row_max
softmax_rows = compiled(_softmax_rows)
softmax_rows_in_place = compiled(_softmax_rows_in_place)


def softmax(src: np.ndarray, dst: np.ndarray, log: bool) -> None:
    """(Log)Softmax along the last axis of 2-D float32 C-contiguous rows (dst may be src)."""
    assert softmax_rows is not None and softmax_rows_in_place is not None
    if same_start(src, dst):
        softmax_rows_in_place(dst, log)
    else:
        softmax_rows(src, dst, log)


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
    if activate is None or activate_row is None or softmax_rows is None or softmax_rows_in_place is None:
        return
    y = np.zeros(4, DTYPE)
    read_only = y.view()
    read_only.flags.writeable = False
    activate(y, SILU, 0.0, 0.0)
    for src in (y, read_only):  # a session's inputs are read-only, a kernel's scratch is not
        activate_row(src, np.empty_like(y), y.size, SILU, 0.0, 0.0)
        for log in (False, True):
            softmax_rows(src.reshape(2, 2), np.empty((2, 2), DTYPE), log)
    for log in (False, True):
        softmax_rows_in_place(y.reshape(2, 2), log)
