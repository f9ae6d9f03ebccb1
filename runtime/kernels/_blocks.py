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

from collections.abc import Callable, Iterator

import numpy as np

# Elements per block: 64 Ki keeps a float64 temporary at 512 KiB, inside a core's L2.
BLOCK = 1 << 16


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


def apply_blocks(fn: Callable[..., None], out: np.ndarray, *inputs: np.ndarray) -> None:
    """Run ``fn(*input_blocks, out_block)`` over `out` block by block.

    Inputs are broadcast to `out`'s shape first (numpy's multidirectional rule, which the
    dispatcher has already checked), and an input block that overlaps its output block is
    copied, so `fn` may write `out_block` before it has finished reading its inputs.
    """
    full = [np.broadcast_to(x, out.shape) for x in inputs]
    for index in block_slices(out.shape):
        out_block = out[index]
        fn(*(readable(x[index], out_block) for x in full), out_block)


def erf(x: np.ndarray, out: np.ndarray) -> None:
    """The error function into `out` (relative error below 1e-6 for every finite x).

    numpy has no erf. Near zero the Maclaurin series is exact to double precision after a
    dozen terms; from |x| = 0.5 on, Abramowitz & Stegun 7.1.26 (absolute error 1.5e-7,
    and erf >= 0.52 there, so relative error stays below 3e-7). Evaluated in float64.
    `x` and `out` must not overlap (use `apply_blocks`, which guarantees it).
    """
    z = np.asarray(x, dtype=np.float64)
    a = np.abs(z)
    # Abramowitz & Stegun 7.1.26 on |x|, sign restored afterwards.
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    far = 1.0 - poly * np.exp(-a * a)
    np.copysign(far, z, out=far)
    # Maclaurin: erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)).
    # Clipped so the series never overflows where the far branch is the one kept.
    s = np.clip(z, -0.5, 0.5)
    z2 = s * s
    term = s.copy()
    near = s.copy()
    for n in range(1, 14):
        term *= -z2 / n
        near += term / (2 * n + 1)
    near *= 2.0 / np.sqrt(np.pi)
    np.copyto(out, np.where(a < 0.5, near, far), casting="unsafe")
