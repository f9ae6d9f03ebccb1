"""greedy_by_breadth: TensorFlow Lite's GreedyByBreadth (GPU delegate), applied to offsets.

1. The breadth of a step is the total size of the buffers live at it (the live curve,
   `planner.bounds.live_sum`, over the stretches where it is constant).
2. Visit steps from the broadest to the narrowest (ties: earlier step first).
3. At each step, place the still-unplaced buffers live there, largest first (an alias
   group by its tallest height; its breadth counted step by step), each in the
   smallest gap that fits among placed buffers live at a common step (else on top).

TensorFlow Lite assigns shared objects this way; memplan uses the same visiting order with
best-fit offsets. Working the crowded steps first packs the peak tightly. Not optimal.
"""

from __future__ import annotations

import time

import numpy as np

from planner.bounds import live_sum
from planner.placement import Blocks, Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register
from planner.strategies._order import by


def visit_rank(blocks: Blocks) -> np.ndarray:
    """For each block, the rank of the broadest step in its lifetime (0 is visited first).
    Breadth counts alias groups by their profiles, step by step."""
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


@register(
    "greedy_by_breadth",
    origin="TensorFlow Lite (GreedyByBreadth)",
    summary="broadest steps first, largest first, best fit",
    rank=50,
)
def greedy_by_breadth(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    b = placer.blocks
    if len(b) == 0:
        return placer.plan("greedy_by_breadth", started)
    order = by(visit_rank(b), -b.size)
    placer.place_all(order, rule="best")
    return placer.plan("greedy_by_breadth", started)
