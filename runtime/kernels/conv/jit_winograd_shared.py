"""The helpers both Winograd variants' compiled transforms use (`jit_winograd`'s F(2x2, 3x3) and
`jit_winograd4`'s F(4x4, 3x3)): reading an input row through the rows saved aside, a plane's run
of tiles, an index known not negative, a variant's three entry loops compiled, and compiling them
on tiny calls."""

from __future__ import annotations

import numpy as np

from runtime.kernels._jit import ENABLED, compiled, numba

DTYPE = np.dtype(np.float32)


def row(x, c, y, height, zeros, saved, first_saved):  # type: ignore[no-untyped-def]
    """Row y of channel c: from `saved` when it holds it, zeros outside the image."""
    if y < 0 or y >= height:
        return zeros
    if first_saved <= y < first_saved + saved.shape[0]:
        return saved[y - first_saved, c]
    return x[c, y]


def plane(m, i, ps, base, n):  # type: ignore[no-untyped-def]
    """Plane i's run of `n` tiles from `base`: a contiguous slice the loops read with plain indices."""
    return m[i * ps + base : i * ps + base + n]


def unsigned(i):  # type: ignore[no-untyped-def]
    """An index known not negative (so that the compiler drops the wraparound checks and vectorises)."""
    return i


if ENABLED:
    row = compiled(row, inline=True)  # type: ignore[assignment]
    plane = compiled(plane, inline=True)  # type: ignore[assignment]
    unsigned = compiled(lambda i: numba.uint64(i), inline=True)  # type: ignore[assignment]


def variant_loops(weights, inputs, outputs) -> tuple:  # type: ignore[no-untyped-def]
    """A variant's three entry loops (weight, input and output transforms) compiled, or three
    Nones with compiled loops off."""
    if not ENABLED:
        return None, None, None
    return compiled(weights), compiled(inputs), compiled(outputs)


def warm_variant(loops: tuple, planes: int, m: int, scratch_elements) -> None:  # type: ignore[no-untyped-def]
    """`warm_loops` over a variant's `variant_loops`, unless compiled loops are off."""
    weights, inputs, outputs = loops
    if weights is not None and inputs is not None and outputs is not None:
        warm_loops(weights, inputs, outputs, planes, m, scratch_elements)


def warm_loops(weights, inputs, outputs, planes: int, m: int, scratch_elements) -> None:  # type: ignore[no-untyped-def]
    """Compile one F(m x m, 3x3) variant's three loops (or load them from numba's cache) on tiny
    calls: `planes` transformed planes, writable and read-only sources, as the kernel calls them."""
    w = np.zeros((1, 1, 3, 3), DTYPE)
    read_only = w.view()
    read_only.flags.writeable = False
    u = np.zeros((planes, 2), DTYPE)[:, :1].reshape(planes, 1, 1)  # planes apart, as the kernel's are
    for src in (w, read_only):
        weights(src, u)
    image = np.zeros((1, m, m), DTYPE)
    image_ro = image.view()
    image_ro.flags.writeable = False
    flat = np.zeros(2 * planes, DTYPE)
    for p in (image, image_ro):
        z = np.zeros(scratch_elements(1, 1), DTYPE)
        inputs(p, flat, 2, np.zeros(m, DTYPE), np.zeros((0, 1, m), DTYPE), -1, 0, 1, 1, 1, 1, z)
    outputs(flat, 2, np.zeros((1, m, m), DTYPE), 0, 1, 1, np.zeros(scratch_elements(1, 1), DTYPE))
