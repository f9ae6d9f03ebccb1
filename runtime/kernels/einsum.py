"""Einsum: numpy's einsum, which speaks the same equation language as ONNX.

Two operands whose equation is a batched matrix product (every letter either in both inputs
and the output: batch; in one input and the output: rows or columns; in both inputs only:
contracted) run as one np.matmul over copies laid out (batch, m, k) @ (batch, k, n) in the
workspace, the product too, then copied into `out` in the output's letter order: BLAS speed
with no temporary beside the arena. Other equations go to np.einsum.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from runtime.kernels import kernel
from runtime.kernels._scratch import Scratch, scratch_bytes


class _Product(NamedTuple):
    """An equation A,B->C as a batched matmul: the letters of each role, in order."""

    a: str
    b: str
    c: str
    batch: str
    m: str
    n: str
    k: str


def _as_product(equation: str, shapes: list[tuple[int, ...]]) -> _Product | None:
    """The equation's matmul roles, or None when it is not a plain two-operand product."""
    if "." in equation or "->" not in equation:
        return None
    lhs, c = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != 2 or len(shapes) != 2:
        return None
    a, b = terms
    if any(len(set(t)) != len(t) for t in (a, b, c)) or len(a) != len(shapes[0]) or len(b) != len(shapes[1]):
        return None
    sizes: dict[str, int] = {}
    for term, shape in zip((a, b), shapes, strict=True):
        for letter, size in zip(term, shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                return None  # a letter of two sizes (numpy would broadcast a 1): leave it to einsum
    if not set(c) <= set(a) | set(b) or not (set(a) | set(b)) <= set(c) | (set(a) & set(b)):
        return None  # a letter summed within one operand only
    batch = "".join(x for x in c if x in a and x in b)
    m = "".join(x for x in c if x in a and x not in b)
    n = "".join(x for x in c if x in b and x not in a)
    k = "".join(x for x in a if x in b and x not in c)
    return _Product(a, b, c, batch, m, n, k)


def _size(letters: str, sizes: dict[str, int]) -> int:
    return math.prod(sizes[x] for x in letters)


def _blocks(p: _Product, shapes: list[tuple[int, ...]], dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    sizes = dict(zip(p.a, shapes[0], strict=True)) | dict(zip(p.b, shapes[1], strict=True))
    nb, nm, nn, nk = (_size(x, sizes) for x in (p.batch, p.m, p.n, p.k))
    return [((nb, nm, nk), dtype), ((nb, nk, nn), dtype), ((nb, nm, nn), dtype)]


def einsum_workspace(inputs, outputs, *, equation, **_) -> int:
    shapes = [tuple(x.shape) for x in inputs]
    p = _as_product(equation.replace(" ", ""), shapes)
    out = outputs[0]
    if p is None or out.dtype not in (np.float32, np.float64):
        return 0
    return scratch_bytes(*_blocks(p, shapes, out.dtype))


def _gathered(x: np.ndarray, term: str, order: str, room: np.ndarray) -> np.ndarray:
    """`x` with its axes in `order` (letters of `term`), copied into `room` (3-D, same size)."""
    np.copyto(
        room.reshape([x.shape[term.index(letter)] for letter in order]), x.transpose([term.index(c) for c in order])
    )
    return room


@kernel("Einsum", workspace=einsum_workspace)
def einsum(*inputs, out, equation, ws=None):
    equation = equation.replace(" ", "")  # ONNX allows spaces around terms; numpy does not
    p = _as_product(equation, [x.shape for x in inputs])
    if p is not None and out.dtype in (np.float32, np.float64) and all(x.dtype == out.dtype for x in inputs):
        scratch = Scratch(ws, "Einsum")
        rooms = [scratch.take(shape, dtype) for shape, dtype in _blocks(p, [x.shape for x in inputs], out.dtype)]
        a = _gathered(inputs[0], p.a, p.batch + p.m + p.k, rooms[0])
        b = _gathered(inputs[1], p.b, p.batch + p.k + p.n, rooms[1])
        np.matmul(a, b, out=rooms[2])
        sizes = dict(zip(p.c, out.shape, strict=True))
        product = rooms[2].reshape([sizes[x] for x in p.batch + p.m + p.n])
        np.copyto(out, product.transpose([(p.batch + p.m + p.n).index(x) for x in p.c]))
        return
    # With two or more operands, let numpy route contractions through BLAS (tensordot): far
    # faster than its element loop, at the price of a temporary as large as the result.
    optimize = "greedy" if len(inputs) > 1 else False
    if any(x.dtype.kind == "V" for x in inputs):
        # Extension floats (bfloat16) have no einsum loops: compute in float32, round once.
        wide = [x.astype(np.float32) for x in inputs]
        out[...] = np.einsum(equation, *wide, optimize=optimize)
        return
    np.einsum(equation, *inputs, out=out, optimize=optimize)
