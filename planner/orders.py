"""The orders greedy placement visits blocks in, as data: each named order is its sort keys,
most significant first, and every order ends in the block index, a unique tie-breaker, so
that a strategy places the same problem the same way every time.

The strategies, the peak moves of `planner.strategies.heuristics` and the packing in pieces
of `planner.exact.pieces` all take their orders from here, so an order means one thing
wherever it is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.blocks import Blocks
from planner.bounds import live_sum


def by(*keys: np.ndarray) -> np.ndarray:
    """Indices sorted by the given keys, most significant first, then by index."""
    if not keys:
        raise ValueError("by() needs at least one key")
    index = np.arange(len(keys[0]))
    return np.lexsort((index, *reversed(keys)))


@dataclass(frozen=True)
class Order:
    """A named visiting order: `keys` gives a block set's sort keys, most significant first."""

    name: str
    keys: Callable[[Blocks], tuple[np.ndarray, ...]]

    def of(self, blocks: Blocks) -> np.ndarray:
        """The block indices in this order (ties by index)."""
        return by(*self.keys(blocks))


def visit_rank(blocks: Blocks) -> np.ndarray:
    """For each block, the rank of the broadest step in its lifetime (0 is visited first):
    TensorFlow Lite's GreedyByBreadth visits steps from the broadest (the most bytes live)
    down, earlier steps first among equals. Breadth counts alias groups by their profiles,
    step by step."""
    first, last = blocks.first, blocks.last
    _, piece_first, piece_last, height = blocks.pieces()
    # Breadth is constant between consecutive event points, so work on those segments.
    points = np.unique(np.concatenate((first, last + 1, piece_first, piece_last + 1)))
    seg_first = np.searchsorted(points, first)
    seg_last = np.searchsorted(points, last + 1) - 1
    breadth = live_sum(
        len(points), np.searchsorted(points, piece_first), np.searchsorted(points, piece_last + 1), height
    )
    rank = np.empty(len(points), dtype=np.int64)
    rank[np.lexsort((np.arange(len(points)), -breadth))] = np.arange(len(points))
    return _range_min(rank, seg_first, seg_last)


def _range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """min(values[lo[i]:hi[i] + 1]) for every i, with a sparse table (O(n log n))."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append(np.minimum(prev[:-width], prev[width:]))
        width *= 2
    level = np.floor(np.log2(hi - lo + 1)).astype(np.int64)
    out = np.empty(len(lo), dtype=np.int64)
    for k in np.unique(level):
        sel = level == k
        out[sel] = np.minimum(table[k][lo[sel]], table[k][hi[sel] - (1 << k) + 1])
    return out


def _span(b: Blocks) -> np.ndarray:
    return b.last - b.first  # steps after the first: orders by lifetime as well as its length would


FIRST_USE = Order("first_use", lambda b: (b.first,))
FIRST_USE_LARGEST = Order("first_use_largest", lambda b: (b.first, -b.size))
LARGEST = Order("largest", lambda b: (-b.size, b.first))
LARGEST_LONGEST = Order("largest_longest", lambda b: (-b.size, -_span(b)))
LONGEST_LARGEST = Order("longest_largest", lambda b: (-_span(b), -b.size))
LARGEST_CONFLICTED = Order("largest_conflicted", lambda b: (-b.size, -b.conflict_counts()))
CONFLICTED_LARGEST = Order("conflicted_largest", lambda b: (-b.conflict_counts(), -b.size))
AREA = Order("area", lambda b: (-b.size * (_span(b) + 1), -b.size))
BREADTH = Order("breadth", lambda b: (visit_rank(b), -b.size))

# The orders and rules tried on every piece of a large problem, the most often best first:
# greedy_by_size (largest first, best gap) and wic (largest first, lowest gap) reach LOAD on
# most traces; by area (bytes x steps) and greedy_by_breadth's order win on some training
# traces, where sizes repeat.
PIECE_ORDERS: tuple[tuple[str, Order, str], ...] = (
    ("greedy_by_size", LARGEST, "best"),
    ("wic", LARGEST, "first"),
    ("area", AREA, "first"),
    ("greedy_by_breadth", BREADTH, "best"),
)
