"""Walks of `planner.timeline`'s segment tree that read no constant of the engine: every
block's canonical nodes at once, the marked ancestors that paths jump between, and the
gathering of the ranges listed at points and kept in own unions on paths to the root."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

Union = list[int] | array  # as in `planner.timeline`


def canonical_nodes(lo: np.ndarray, hi: np.ndarray, leaves: int) -> np.ndarray:
    """Every block's canonical nodes, all blocks at once (with repeats)."""
    left, right = lo + leaves, hi + leaves + 1
    nodes = []
    while True:
        active = left < right
        if not active.any():
            break
        take = active & (left & 1).astype(bool)
        nodes.append(left[take])
        left = left + take
        take = active & (right & 1).astype(bool)
        right = right - take
        nodes.append(right[take])
        left >>= 1
        right >>= 1
    return np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int64)


def nearest_marked_ancestor(marked: np.ndarray, leaves: int) -> np.ndarray:
    """For every node, its nearest strict ancestor that is marked (0: none)."""
    up = np.zeros(2 * leaves, dtype=np.int32)
    width = 1
    while width < leaves:
        parents = np.arange(width, 2 * width)
        nearest = np.where(marked[parents], parents, up[parents]).astype(np.int32)
        up[2 * width : 4 * width : 2] = nearest
        up[2 * width + 1 : 4 * width : 2] = nearest
        width *= 2
    return up


def gather_points(
    listed: Sequence[list[int] | None], starting: Sequence[list[int] | None], lo: int, hi: int, found: list[int]
) -> None:
    """Append the ranges of the short blocks live somewhere in [lo, hi]: those listed at `lo`
    and those starting after it, each once."""
    got = listed[lo]
    if got:
        found += got
    for point in range(lo + 1, hi + 1):
        got = starting[point]
        if got:
            found += got


def gather_path(
    own: Sequence[Union | None], up: Sequence[int], x: int, y: int, found: list[int], unions: list[Union]
) -> None:
    """Collect the own unions of nodes `x` and `y` and of every ancestor of either, each
    node once: short ones (lists) into `found`, long ones (arrays) into `unions`.

    An ancestor has a smaller index than its descendants, so the larger of x and y is never
    an ancestor of the other: reading it and moving it up meets each node once, also when
    one of x and y lies above the other (a long block's outer canonical nodes often do)."""
    while x != y:
        if x > y:
            got, x = own[x], up[x]
        else:
            got, y = own[y], up[y]
        if got:
            if type(got) is list:
                found += got
            else:
                unions.append(got)
    while x:
        got = own[x]
        if got:
            if type(got) is list:
                found += got
            else:
                unions.append(got)
        x = up[x]
