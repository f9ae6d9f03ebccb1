"""Activations: Relu and its relatives, sigmoid-like gates, Gelu, Softmax and LogSoftmax.

Attribute defaults are the ONNX spec's. Formulas that read their input after writing
`out` run through `apply_blocks`, which bounds temporaries and keeps in-place use safe.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._blocks import apply_blocks, erf, readable

# np.maximum against a scalar runs numpy's broadcast loop, three to four times slower than
# against an array; against a row of zeros it runs the vectorised one (NaN still propagates).
# One row per float dtype, made at import so that no run allocates it beside the arena.
ZERO_ROW = 1 << 14
_ZEROS = {np.dtype(t): np.zeros(ZERO_ROW, t) for t in (np.float32, np.float64)}


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


@kernel("LeakyRelu", inplace=(0,))
def leaky_relu(x, *, out, alpha=0.01):
    def block(x, o):
        np.multiply(x, alpha, out=o)
        np.copyto(o, x, where=x >= 0)

    apply_blocks(block, out, x)


@kernel("PRelu", inplace=(0,))
def prelu(x, slope, *, out):
    """`slope` broadcasts to `x` (unidirectionally)."""

    def block(x, s, o):
        np.multiply(x, s, out=o)
        np.copyto(o, x, where=x >= 0)

    apply_blocks(block, out, x, slope)


@kernel("ThresholdedRelu", inplace=(0,))
def thresholded_relu(x, *, out, alpha=1.0):
    apply_blocks(lambda x, o: np.multiply(x, x > alpha, out=o), out, x)


@kernel("Elu", inplace=(0,))
def elu(x, *, out, alpha=1.0):
    def block(x, o):
        with np.errstate(over="ignore"):
            np.expm1(x, out=o)
        o *= alpha
        np.copyto(o, x, where=x >= 0)

    apply_blocks(block, out, x)


@kernel("Selu", inplace=(0,))
def selu(x, *, out, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    def block(x, o):
        with np.errstate(over="ignore"):
            np.expm1(x, out=o)
        o *= alpha
        np.copyto(o, x, where=x > 0)
        o *= gamma

    apply_blocks(block, out, x)


@kernel("Celu", inplace=(0,))
def celu(x, *, out, alpha=1.0):
    def block(x, o):
        # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): the two terms never both count.
        with np.errstate(over="ignore"):
            np.divide(x, alpha, out=o)
            np.expm1(o, out=o)
        o *= alpha
        np.copyto(o, x, where=x >= 0)

    apply_blocks(block, out, x)


@kernel("Sigmoid", inplace=(0,))
def sigmoid(x, *, out):
    # 1 / (1 + exp(-x)): exp overflows to inf for x << 0 and the result is then exactly 0.
    with np.errstate(over="ignore"):
        np.negative(x, out=out)
        np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


@kernel("Tanh", inplace=(0,))
def tanh(x, *, out):
    np.tanh(x, out=out)


@kernel("HardSigmoid", inplace=(0,))
def hard_sigmoid(x, *, out, alpha=0.2, beta=0.5):
    np.multiply(x, alpha, out=out)
    out += beta
    np.clip(out, 0, 1, out=out)


@kernel("HardSwish", inplace=(0,))
def hard_swish(x, *, out):
    def block(x, o):
        hard_sigmoid(x, out=o, alpha=1 / 6, beta=0.5)
        o *= x

    apply_blocks(block, out, x)


def _softplus(x, o):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which never overflows.
    np.abs(x, out=o)
    np.negative(o, out=o)
    np.exp(o, out=o)
    np.log1p(o, out=o)
    o += np.maximum(x, 0)


@kernel("Softplus", inplace=(0,))
def softplus(x, *, out):
    apply_blocks(_softplus, out, x)


@kernel("Softsign", inplace=(0,))
def softsign(x, *, out):
    def block(x, o):
        np.abs(x, out=o)
        o += 1
        np.divide(x, o, out=o)

    apply_blocks(block, out, x)


@kernel("Mish", inplace=(0,))
def mish(x, *, out):
    def block(x, o):
        _softplus(x, o)
        np.tanh(o, out=o)
        o *= x

    apply_blocks(block, out, x)


@kernel("Gelu", inplace=(0,))
def gelu(x, *, out, approximate="none"):
    """x * Phi(x), with Phi exact (erf) or its tanh approximation (approximate="tanh")."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

    def block(x, o):
        if approximate == "tanh":
            # Phi(x) ~ (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2
            np.power(x, 3, out=o)
            o *= 0.044715
            o += x
            o *= math.sqrt(2 / math.pi)
            np.tanh(o, out=o)
        else:
            erf(x * (1 / math.sqrt(2)), o)
        o += 1
        o *= x
        o *= 0.5

    apply_blocks(block, out, x)


def _softmax(x, out, axis, log):
    # Shift by the max so exp never overflows; a log-softmax recomputes x - max afterwards
    # rather than keeping a full-size copy of it.
    if log:
        x = readable(x, out)
    peak = np.max(x, axis=axis, keepdims=True)
    np.subtract(x, peak, out=out)
    np.exp(out, out=out)
    total = np.sum(out, axis=axis, keepdims=True)
    if log:
        np.subtract(x, peak, out=out)
        out -= np.log(total)
    else:
        out /= total


def _softmax_kernel(x, out, axis, opset, log):
    """Opset 13 normalises along `axis` (default -1); earlier opsets flatten the input to
    2-D at `axis` (default 1) and normalise each row."""
    if axis is None:
        axis = -1 if opset >= 13 else 1
    if x.size == 0:
        return
    if x.ndim == 0:
        _softmax(x, out, None, log)
        return
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim + (opset < 13):
        raise ValueError(f"axis {axis} out of range for rank {x.ndim}")
    if opset >= 13:
        _softmax(x, out, axis, log)
        return
    rows = math.prod(x.shape[:axis])
    flat = (rows, x.size // rows)
    _softmax(x.reshape(flat), np.reshape(out, flat, copy=False), 1, log)


@kernel("Softmax", inplace=(0,))
def softmax(x, *, out, axis=None, opset):
    _softmax_kernel(x, out, axis, opset, log=False)


@kernel("LogSoftmax", inplace=(0,))
def log_softmax(x, *, out, axis=None, opset):
    _softmax_kernel(x, out, axis, opset, log=True)


@kernel("Clip", inplace=(0,))
def clip(x, min=None, max=None, *, out):
    """Bounds are inputs from opset 11 and attributes before it; both arrive here as
    `min`/`max`, and an absent bound does not clip."""
    lo = None if min is None else np.asarray(min, dtype=x.dtype)
    hi = None if max is None else np.asarray(max, dtype=x.dtype)
    if lo is None and hi is None:
        np.copyto(out, x)
    else:
        np.clip(x, lo, hi, out=out)
