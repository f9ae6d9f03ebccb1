"""Helpers shared by the elementwise kernel families.

Two problems every multi-step elementwise kernel meets:

* temporaries: a formula such as ``x * sigmoid(x)`` needs a second array beside the
  output. Evaluating it block by block keeps such temporaries at `BLOCK` elements, so
  the bytes allocated outside the arena stay small and independent of the tensor size;
* aliasing: the planner may place an output on top of a dying input (in-place Relu).
  A kernel that reads an input after writing `out` would then read its own result.
  `apply_blocks` hands each block function inputs that never share memory with its
  output block (copying the block when they do), so block functions may reuse `out`
  freely as scratch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from runtime.kernels._scratch import same_start

# Elements per block: 16 Ki keeps a float64 temporary at 128 KiB, inside a core's L2.
BLOCK = 1 << 14


def block_slices(shape: tuple[int, ...], block: int = BLOCK) -> Iterator[tuple]:
    """Index tuples that cover an array of `shape` in C order, each at most ~`block` elements.

    The trailing axes that fit in one block are taken whole; the axis before them is cut
    into ranges; the axes before that are walked one index at a time.
    """
    tail = 1
    k = len(shape)
    while k > 0 and tail * shape[k - 1] <= block:
        tail *= shape[k - 1]
        k -= 1
    if k == 0:
        # Not (): indexing a 0-d array with () gives a scalar, with ... a writable view.
        yield (Ellipsis,)
        return
    step = max(1, block // max(tail, 1))
    for lead in np.ndindex(*shape[: k - 1]):
        for start in range(0, shape[k - 1], step):
            yield (*lead, slice(start, start + step))


def readable(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """`x`, or a copy of it when it shares memory with `out` (which is about to be written)."""
    return x.copy() if np.shares_memory(x, out) else x


def same_memory(x: np.ndarray, out: np.ndarray) -> bool:
    """True when `x` is exactly `out`'s elements (an in-place operand): one ufunc call may
    then read and write it, element by element, with no copy."""
    return x.shape == out.shape and x.strides == out.strides and same_start(x, out)


def apply_blocks(fn: Callable[..., None], out: np.ndarray, *inputs: np.ndarray) -> None:
    """Run ``fn(*input_blocks, out_block)`` over `out` block by block.

    Inputs are broadcast to `out`'s shape first (numpy's multidirectional rule, which shape
    inference at load has already applied to `out`), and an input block that overlaps its output block is
    copied, so `fn` may write `out_block` before it has finished reading its inputs.
    """
    full = [np.broadcast_to(x, out.shape) for x in inputs]
    for index in block_slices(out.shape):
        out_block = out[index]
        fn(*(readable(x[index], out_block) for x in full), out_block)


# Maclaurin coefficients of erf(x) / x in powers of x^2: (-1)^n / (n! (2n+1)) * 2/sqrt(pi).
_ERF_SERIES = [(-1) ** n / (math.factorial(n) * (2 * n + 1)) * 2 / math.sqrt(math.pi) for n in range(14)]
# Abramowitz & Stegun 7.1.26: erf(x) ~ 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p x).
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _horner(coefficients, x, acc):
    """acc = sum_i coefficients[i] * x**i, evaluated in place."""
    acc.fill(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc *= x
        acc += c


def erf(x: np.ndarray, out: np.ndarray) -> None:
    """The error function into `out` (relative error below 3e-7 for every finite x).

    numpy has no erf. For |x| < 0.5 a 14-term Maclaurin series (exact to double precision
    there); from 0.5 on, Abramowitz & Stegun 7.1.26 (absolute error 1.5e-7 where erf >=
    0.52). Evaluated in float64 with four block-sized temporaries.
    `x` and `out` must not overlap (use `apply_blocks`, which guarantees it).
    """
    z = np.array(x, dtype=np.float64)
    near = np.abs(z) < 0.5
    # Far branch on |x|, the sign restored at the end.
    a = np.abs(z)
    t = np.multiply(a, _AS_P)
    t += 1
    np.reciprocal(t, out=t)
    far = np.empty_like(z)
    _horner(_AS_A, t, far)
    far *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    far *= a
    np.subtract(1.0, far, out=far)
    # Near branch: x * series(x^2), with x clipped so the series never overflows.
    np.clip(z, -0.5, 0.5, out=t)
    np.square(t, out=a)
    series = z
    np.copysign(far, z, out=far)
    _horner(_ERF_SERIES, a, series)
    series *= t
    np.copyto(far, series, where=near)
    np.copyto(out, far, casting="unsafe")
