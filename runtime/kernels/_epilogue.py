"""Activations applied in place to a block a kernel has just written (a fused Conv's output).

`activation(name, ...)` gives ``fn(y, temp)``: it overwrites `y` (flat) with the activation
of its values. Formulas that need a second array (HardSwish, Silu) run a `temp`-sized chunk
at a time (the kernel declares `TEMP` elements as workspace), so each chunk is still in
cache for its next operation; the others run over `y` whole, in fewer numpy calls.

The formulas are the ONNX spec's (Silu = x * Sigmoid(x), as PyTorch exports it in two ops).
With compiled loops (`runtime.kernels._jit`), a float32 activation runs as one compiled pass
(`runtime.kernels.jit_activation`) and needs no temp; each function carries its `spec`, so a
compiled kernel can apply it inside its own loop (`Finish`, read by the depthwise Conv).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from runtime.kernels import jit_activation

ACTIVATIONS = ("Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "Silu")
NEEDS_TEMP = ("HardSwish", "Silu")  # the formulas that take a temp
# Elements of the temp the chunked formulas take: 256 KiB of float32, in L2 beside the chunk it
# serves. Smaller chunks cost more in numpy calls than they gain in cache (measured: Silu over
# a 1.2M-element map is 1.5x slower in 16 Ki-element chunks).
TEMP = 1 << 16

Activation = Callable[[np.ndarray, np.ndarray], None]

# exp(x) = exp2(x log2 e): numpy's exp2 takes half the time of its exp on float32 (0.35 against
# 0.75 ns an element, measured), within 4e-6 relative over float32's whole range (the rounding
# of x log2 e); the kernels fold the factor into a multiplication or negation they make anyway.
LOG2E = math.log2(math.e)
EXP2_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # half floats keep exp: log2 e rounds too coarsely


def _one_plus_exp_minus(y: np.ndarray, out: np.ndarray) -> None:
    """out = 1 + exp(-y), as 1 + exp2(-y log2 e). exp2 overflows to inf for y << 0, and x / inf is
    then exactly 0: callers run this under ``np.errstate(over="ignore")``, entered once per call
    rather than per chunk."""
    if out.dtype in EXP2_DTYPES:
        np.multiply(y, out.dtype.type(-LOG2E), out=out)
        np.exp2(out, out=out)
    else:
        np.negative(y, out=out)
        np.exp(out, out=out)
    out += out.dtype.type(1)


@functools.lru_cache(maxsize=256)
def activation(
    name: str, dtype: np.dtype, *, lo: float = -np.inf, hi: float = np.inf, alpha: float = 0.2, beta: float = 0.5
) -> Activation:
    """The in-place function of activation `name` (one of `ACTIVATIONS`) on flat arrays of
    `dtype`: Clip takes `lo` and `hi`, HardSigmoid `alpha` and `beta`. Cached: a kernel's
    workspace function calls it at prepare, so that its constants are made before any run."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not one memplan fuses; accepted: {', '.join(ACTIVATIONS)}")
    # np.clip with both bounds as 0-d arrays runs numpy's vectorised loop, two to three times
    # faster than np.maximum or np.clip against one scalar bound.
    zero, one, inf = (np.asarray(v, dtype) for v in (0, 1, np.inf))
    low, high = np.asarray(lo, dtype), np.asarray(hi, dtype)

    def relu(y: np.ndarray, _: np.ndarray) -> None:
        np.clip(y, zero, inf, out=y)

    def clip(y: np.ndarray, _: np.ndarray) -> None:
        np.clip(y, low, high, out=y)

    def hard_sigmoid(y: np.ndarray, _: np.ndarray) -> None:
        y *= alpha
        y += beta
        np.clip(y, zero, one, out=y)

    def hard_swish(y: np.ndarray, temp: np.ndarray) -> None:
        # x * max(0, min(1, x / 6 + 1 / 2)), a temp-sized chunk at a time
        for start in range(0, y.size, temp.size):
            chunk = y[start : start + temp.size]
            t = temp[: chunk.size]
            np.multiply(chunk, 1 / 6, out=t)
            t += 0.5
            np.clip(t, zero, one, out=t)
            chunk *= t

    def sigmoid(y: np.ndarray, _: np.ndarray) -> None:
        with np.errstate(over="ignore"):
            _one_plus_exp_minus(y, y)
        np.reciprocal(y, out=y)

    def silu(y: np.ndarray, temp: np.ndarray) -> None:
        # x / (1 + exp(-x)): one division, no reciprocal then product
        with np.errstate(over="ignore"):
            for start in range(0, y.size, temp.size):
                chunk = y[start : start + temp.size]
                t = temp[: chunk.size]
                _one_plus_exp_minus(chunk, t)
                np.divide(chunk, t, out=chunk)

    table: dict[str, Activation] = {
        "Relu": relu,
        "Clip": clip,
        "HardSigmoid": hard_sigmoid,
        "HardSwish": hard_swish,
        "Sigmoid": sigmoid,
        "Silu": silu,
    }
    return Act(table[name], jit_activation.spec(name, lo=lo, hi=hi, alpha=alpha, beta=beta))


class Act:
    """An in-place activation ``fn(y, temp)``: the compiled pass for float32 when compiled loops
    are on, else numpy's formula. `spec` is its `jit_activation.spec`."""

    def __init__(self, numpy_fn: Activation, spec: tuple[int, float, float]) -> None:
        self.numpy_fn, self.spec = numpy_fn, spec

    def __call__(self, y: np.ndarray, temp: np.ndarray) -> None:
        if jit_activation.usable(y):
            jit_activation.run(self.spec, y, y)
        else:
            self.numpy_fn(y, temp)


def apply(fn: Activation, block: np.ndarray, temp: np.ndarray) -> None:
    """`fn` over `block` (contiguous, written in place), with `temp` for the formulas that need it."""
    fn(block.reshape(-1), temp)


class Finish:
    """`fn` over each block a kernel has just written (`apply`, with `temp`); a compiled kernel
    reads `spec` to apply it inside its own loop instead."""

    def __init__(self, fn: Activation, temp: np.ndarray) -> None:
        self.fn, self.temp = fn, temp
        self.spec = fn.spec if isinstance(fn, Act) else None

    def __call__(self, block: np.ndarray) -> None:
        apply(self.fn, block, self.temp)
