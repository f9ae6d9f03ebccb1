"""Activations: Relu and its relatives, sigmoid-like gates, Gelu, Softmax and LogSoftmax.

Attribute defaults are the ONNX spec's. Formulas that read their input after writing
`out` run chunk by chunk through `run_chunks`, which copies an input chunk that `out`
overlaps (in place) into the workspace, so that nothing is allocated beside the arena.
With compiled loops (`runtime.kernels._jit`), float32 Sigmoid, HardSigmoid, HardSwish,
Clip, Gelu and Softmax/LogSoftmax over the last axis run one compiled pass
(`runtime.kernels.jit_activation`) instead of several numpy ones.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import jit_activation, kernel
from runtime.kernels._blocks import BLOCK
from runtime.kernels._chunks import chunks_workspace, run_chunks
from runtime.kernels._epilogue import EXP2_DTYPES, LOG2E
from runtime.kernels._scratch import Scratch, scratch_bytes, small_ufunc_buffers

# np.maximum against a scalar runs numpy's broadcast loop, three to four times slower than
# against an array; against a row of zeros it runs the vectorised one (NaN still propagates).
# One row per float dtype, made at import so that no run allocates it beside the arena.
ZERO_ROW = 1 << 14
_ZEROS = {np.dtype(t): np.zeros(ZERO_ROW, t) for t in (np.float32, np.float64)}


def _compiled(name: str, x: np.ndarray, out: np.ndarray, **params: float) -> bool:
    """Run activation `name` through the compiled loop when it takes these arrays; whether it did."""
    if x.shape != out.shape or not jit_activation.usable(x, out):
        return False
    jit_activation.run(jit_activation.spec(name, **params), x, out)
    return True


def warm(inputs, outputs, **_) -> None:
    """The prepare hook of the kernels with compiled loops: compiled when a session prepares
    (never in a run, nor when a model is only planned)."""
    if outputs[0] is not None and outputs[0].dtype == jit_activation.DTYPE:
        jit_activation.warm()


def copies_workspace(inputs, outputs, **_) -> int:
    """Room for a copy of each input's chunk (see `run_chunks`)."""
    return chunks_workspace(outputs[0].shape, [x.dtype for x in inputs])


@kernel("Relu", inplace=(0,))
def relu(x, *, out):
    zeros = _ZEROS.get(out.dtype)
    if zeros is None or x.dtype != out.dtype or not (x.flags.c_contiguous and out.flags.c_contiguous):
        np.maximum(x, 0, out=out)
        return
    # Rows of ZERO_ROW elements against the zero row, then the tail: x may be out itself.
    src, dst = x.reshape(-1), out.reshape(-1)
    whole = dst.size - dst.size % ZERO_ROW
    if whole:
        np.maximum(src[:whole].reshape(-1, ZERO_ROW), zeros, out=dst[:whole].reshape(-1, ZERO_ROW))
    if whole < dst.size:
        np.maximum(src[whole:], zeros[: dst.size - whole], out=dst[whole:])


@kernel("LeakyRelu", inplace=(0,), workspace=copies_workspace)
def leaky_relu(x, *, out, ws=None, alpha=0.01):
    def block(x, o):
        np.multiply(x, alpha, out=o)
        np.copyto(o, x, where=x >= 0)

    run_chunks(block, out, [x], ws, "LeakyRelu")


@kernel("PRelu", inplace=(0,), workspace=copies_workspace)
def prelu(x, slope, *, out, ws=None):
    """`slope` broadcasts to `x` (unidirectionally)."""

    def block(x, s, o):
        np.multiply(x, s, out=o)
        np.copyto(o, x, where=x >= 0)

    run_chunks(block, out, [x, slope], ws, "PRelu")


@kernel("ThresholdedRelu", inplace=(0,), workspace=copies_workspace)
def thresholded_relu(x, *, out, ws=None, alpha=1.0):
    run_chunks(lambda x, o: np.multiply(x, x > alpha, out=o), out, [x], ws, "ThresholdedRelu")


@kernel("Elu", inplace=(0,), workspace=copies_workspace)
def elu(x, *, out, ws=None, alpha=1.0):
    def block(x, o):
        with np.errstate(over="ignore"):
            np.expm1(x, out=o)
        o *= alpha
        np.copyto(o, x, where=x >= 0)

    run_chunks(block, out, [x], ws, "Elu")


@kernel("Selu", inplace=(0,), workspace=copies_workspace)
def selu(x, *, out, ws=None, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    def block(x, o):
        with np.errstate(over="ignore"):
            np.expm1(x, out=o)
        o *= alpha
        np.copyto(o, x, where=x > 0)
        o *= gamma

    run_chunks(block, out, [x], ws, "Selu")


@kernel("Celu", inplace=(0,), workspace=copies_workspace)
def celu(x, *, out, ws=None, alpha=1.0):
    def block(x, o):
        # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): the two terms never both count.
        with np.errstate(over="ignore"):
            np.divide(x, alpha, out=o)
            np.expm1(o, out=o)
        o *= alpha
        np.copyto(o, x, where=x >= 0)

    run_chunks(block, out, [x], ws, "Celu")


@kernel("Sigmoid", inplace=(0,), prepare=warm)
def sigmoid(x, *, out, ws=None):
    if _compiled("Sigmoid", x, out):
        return
    # 1 / (1 + exp2(-x log2 e)): exp2 overflows to inf for x << 0 and the result is then exactly 0.
    with np.errstate(over="ignore"):
        if out.dtype in EXP2_DTYPES:
            np.multiply(x, out.dtype.type(-LOG2E), out=out)
            np.exp2(out, out=out)
        else:
            np.negative(x, out=out)
            np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


@kernel("Tanh", inplace=(0,))
def tanh(x, *, out):
    np.tanh(x, out=out)


@kernel("HardSigmoid", inplace=(0,), prepare=warm)
def hard_sigmoid(x, *, out, ws=None, alpha=0.2, beta=0.5):
    if _compiled("HardSigmoid", x, out, alpha=alpha, beta=beta):
        return
    np.multiply(x, alpha, out=out)
    out += beta
    np.clip(out, 0, 1, out=out)


@kernel("HardSwish", inplace=(0,), workspace=copies_workspace, prepare=warm)
def hard_swish(x, *, out, ws=None):
    if _compiled("HardSwish", x, out):
        return

    def block(x, o):
        hard_sigmoid(x, out=o, alpha=1 / 6, beta=0.5)
        o *= x

    run_chunks(block, out, [x], ws, "HardSwish")


def _softplus(x, o):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which never overflows.
    np.abs(x, out=o)
    np.negative(o, out=o)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    np.add(o, x, out=o, where=x > 0)


@kernel("Softplus", inplace=(0,), workspace=copies_workspace)
def softplus(x, *, out, ws=None):
    run_chunks(_softplus, out, [x], ws, "Softplus")


@kernel("Softsign", inplace=(0,), workspace=copies_workspace)
def softsign(x, *, out, ws=None):
    def block(x, o):
        np.abs(x, out=o)
        o += 1
        np.divide(x, o, out=o)

    run_chunks(block, out, [x], ws, "Softsign")


@kernel("Mish", inplace=(0,), workspace=copies_workspace)
def mish(x, *, out, ws=None):
    def block(x, o):
        _softplus(x, o)
        np.tanh(o, out=o)
        o *= x

    run_chunks(block, out, [x], ws, "Mish")


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for float16 (and float32), float64 for float64."""
    return np.promote_types(dtype, np.float32)


def gelu_workspace(inputs, outputs, *, approximate="none", **_) -> int:
    out = outputs[0]
    return chunks_workspace(out.shape, [_compute_dtype(out.dtype)] * (1 if approximate == "tanh" else 3))


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-z^2) + e, t = 1 / (1 + p z),
# |e| <= 1.5e-7 for z >= 0. In Gelu, x Phi(x) = relu(x) - |x| (1 - erf(|x| / sqrt 2)) / 2, so the
# error is at most |x| 0.75e-7, below float32's rounding of the result.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _gelu_erf_chunk(x, o, a, b, c) -> None:
    """o = x Phi(x) = relu(x) - |x| e^(-x^2/2) t P(t) / 2, t = 1 / (1 + p |x| / sqrt 2): every
    term is finite and non-negative, so no branch. x is read before o is written (in place)."""
    t = a.dtype.type
    # a = |x|, capped at 1e4 for positive x only (the exponential is 0 long before): +inf
    # then gives inf, and -inf gives inf * 0 = NaN, as x * Phi(x) does in onnx.reference and
    # onnxruntime.
    np.minimum(x, t(1e4), out=a)
    np.negative(x, out=b)
    np.maximum(a, b, out=a)
    np.multiply(a, a, out=b)
    b *= t(-0.5 * LOG2E)
    np.exp2(b, out=b)
    with np.errstate(invalid="ignore"):  # -inf: the intended NaN
        b *= a  # |x| e^(-x^2/2)
    a *= t(_AS_P / math.sqrt(2))
    a += t(1)
    np.reciprocal(a, out=a)  # t
    np.multiply(a, t(_AS_A[-1] / 2), out=c)
    for coefficient in reversed(_AS_A[:-1]):
        c += t(coefficient / 2)
        c *= a
    c *= b
    _relu_into(x, o)
    np.subtract(o, c, out=o, casting="same_kind")


def _gelu_tanh_chunk(x, o, a) -> None:
    """o = x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2; x is read by the last ufunc."""
    t = a.dtype.type
    k = math.sqrt(2 / math.pi)
    np.multiply(x, x, out=a)
    a *= t(0.044715 * k)
    a += t(k)
    a *= x
    np.tanh(a, out=a)
    a += t(1)
    a *= t(0.5)
    np.multiply(x, a, out=o, casting="same_kind")


@kernel("Gelu", inplace=(0,), workspace=gelu_workspace, prepare=warm)
def gelu(x, *, out, approximate="none", ws=None):
    """x * Phi(x), with Phi exact (erf) or its tanh approximation (approximate="tanh")."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if _compiled("GeluTanh" if approximate == "tanh" else "Gelu", x, out):
        return
    chunk, temps = (_gelu_tanh_chunk, 1) if approximate == "tanh" else (_gelu_erf_chunk, 3)
    run_chunks(chunk, out, [x], ws, "Gelu", [_compute_dtype(out.dtype)] * temps, reads_before_writes=True)


def _relu_into(x: np.ndarray, o: np.ndarray) -> None:
    """max(x, 0) into o (x may be o), against the zero row when it can."""
    zeros = _ZEROS.get(x.dtype)
    if zeros is not None and x.ndim == 1 and x.size <= ZERO_ROW:
        np.maximum(x, zeros[: x.size], out=o, casting="same_kind")
    else:
        np.maximum(x, x.dtype.type(0), out=o, casting="same_kind")


def _softmax_3d(shape: tuple[int, ...], axis: int, opset: int) -> tuple[int, int, int]:
    """(outer, n, inner): the input seen as 3-D with the normalised elements along axis 1.
    Opset 13 normalises along `axis`; earlier opsets flatten to 2-D at `axis`."""
    if opset >= 13:
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    rows = math.prod(shape[:axis])
    return rows, math.prod(shape) // max(rows, 1), 1


def _softmax_layouts(shape: tuple[int, ...], axis) -> list[tuple[int, int, int]]:
    """Every 3-D view the kernel may take (the workspace function does not know the opset)."""
    if not shape:
        return [(1, 1, 1)]
    found = []
    for opset in (12, 13):
        a = (-1 if opset >= 13 else 1) if axis is None else axis
        a = a + len(shape) if a < 0 else a
        if 0 <= a < len(shape) + (opset < 13):
            found.append(_softmax_3d(tuple(shape), a, opset))
    return found or [(1, 1, 1)]


def _log_chunk(outer: int, n: int, inner: int) -> tuple[int, int]:
    """(outer rows, inner columns) per chunk of a log-softmax's exponentials: about `BLOCK`
    elements, at least one whole normalised row of n."""
    if n * inner <= BLOCK:
        return max(1, min(outer, BLOCK // max(1, n * inner))), inner
    return 1, max(1, min(inner, BLOCK // max(1, n)))


def softmax_workspace(inputs, outputs, *, axis=None, **_) -> int:
    out = outputs[0]
    layouts = _softmax_layouts(tuple(out.shape), axis)
    stats = max(o * i for o, _, i in layouts)
    ones = max((n for _, n, _ in layouts if n <= BLOCK), default=0)  # the column of ones of `_row_sums`
    return scratch_bytes(((stats,), out.dtype), ((stats,), out.dtype), ((ones,), out.dtype))


def log_softmax_workspace(inputs, outputs, *, axis=None, **_) -> int:
    out = outputs[0]
    chunk = max(math.prod(_log_chunk(o, n, i)) * n for o, n, i in _softmax_layouts(tuple(out.shape), axis))
    return softmax_workspace(inputs, outputs, axis=axis) + scratch_bytes(((chunk,), out.dtype))


def _row_sums(y3: np.ndarray, total: np.ndarray, scratch: Scratch) -> None:
    """Sums along axis 1 of (outer, n, inner) into `total`; for rows along the last axis as a
    matrix-vector product through BLAS (about four times numpy's reduction on 200-wide rows)
    when a column of ones as long as a row is small."""
    outer, n, inner = y3.shape
    if inner == 1 and n <= BLOCK and y3.dtype in (np.float32, np.float64) and y3.flags.c_contiguous:
        ones = scratch.take((n, 1), y3.dtype)
        ones.fill(1)
        np.matmul(y3.reshape(outer, n), ones, out=total.reshape(outer, 1))
    else:
        np.sum(y3, axis=1, keepdims=True, out=total)


@small_ufunc_buffers()  # the maxima and sums broadcast along the rows
def _softmax(x, out, layout, log, ws, owner):
    """Shift by the row maxima so exp never overflows; the maxima and sums live in the
    workspace, and a log-softmax takes its exponentials a chunk of rows at a time there
    (`out` holds x - max: x is read once, before `out` is written, so in place is safe)."""
    outer, n, inner = layout
    if inner == 1 and jit_activation.usable(x, out) and jit_activation.softmax_rows is not None:
        jit_activation.softmax(x.reshape(outer, n), out.reshape(outer, n), log)
        return
    x3, y3 = x.reshape(layout), out.reshape(layout)
    scratch = Scratch(ws, owner)
    peak = scratch.take((outer, 1, inner), out.dtype)
    total = scratch.take((outer, 1, inner), out.dtype)
    np.max(x3, axis=1, keepdims=True, out=peak)
    np.subtract(x3, peak, out=y3)
    if not log:
        if y3.dtype in EXP2_DTYPES:
            # A mask's float32 minimum minus the row maximum overflows to -inf: exp2 makes it 0.
            with np.errstate(over="ignore"):
                y3 *= y3.dtype.type(LOG2E)
            np.exp2(y3, out=y3)
        else:
            np.exp(y3, out=y3)
        _row_sums(y3, total, scratch)
        np.reciprocal(total, out=total)
        y3 *= total
        return
    rows, cols = _log_chunk(outer, n, inner)
    room = scratch.take((rows * n * cols,), out.dtype)
    for start in range(0, outer, rows):
        for col in range(0, inner, cols):
            part = y3[start : start + rows, :, col : col + cols]
            e = room[: part.size].reshape(part.shape)
            np.exp(part, out=e)
            np.sum(e, axis=1, keepdims=True, out=total[start : start + rows, :, col : col + cols])
    np.log(total, out=total)
    y3 -= total


def _softmax_kernel(x, out, axis, opset, log, ws):
    if axis is None:
        axis = -1 if opset >= 13 else 1
    if x.size == 0:
        return
    if x.ndim == 0:
        out[...] = 0 if log else 1
        return
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim + (opset < 13):
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    layout = _softmax_3d(x.shape, axis, opset)
    _softmax(x, out, layout, log, ws, "LogSoftmax" if log else "Softmax")


@kernel("Softmax", inplace=(0,), workspace=softmax_workspace, prepare=warm)
def softmax(x, *, out, axis=None, opset, ws=None):
    _softmax_kernel(x, out, axis, opset, False, ws)


@kernel("LogSoftmax", inplace=(0,), workspace=log_softmax_workspace, prepare=warm)
def log_softmax(x, *, out, axis=None, opset, ws=None):
    _softmax_kernel(x, out, axis, opset, True, ws)


@kernel("Clip", inplace=(0,), prepare=warm)
def clip(x, min=None, max=None, *, out, ws=None):
    """Bounds are inputs from opset 11 and attributes before it; both arrive here as
    `min`/`max`, and an absent bound does not clip."""
    lo_hi = [-np.inf if min is None else float(min), np.inf if max is None else float(max)]
    if (min is not None or max is not None) and _compiled("Clip", x, out, lo=lo_hi[0], hi=lo_hi[1]):
        return
    lo = None if min is None else np.asarray(min, dtype=x.dtype)
    hi = None if max is None else np.asarray(max, dtype=x.dtype)
    if lo is None and hi is None:
        np.copyto(out, x)
    else:
        np.clip(x, lo, hi, out=out)
