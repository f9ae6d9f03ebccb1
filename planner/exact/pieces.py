"""Large problems in pieces: what `optimal` (and `best`, without the search) do past the
exact search's reach.

1. Blocks live at every step where any block lives (weights, a graph's input and output)
   meet every other block (alias groups whose height changes excepted: they go to pieces). Stacked one above the other on top of the rest, they cost
   their sum, which every plan pays too: LOAD counts them at every step. Nothing is lost.
2. The rest splits at cut lines, boundaries between steps that no block crosses
   (MiniMalloc's decomposition): the pieces share no step, so each is packed from offset 0
   on its own and the arena is the highest piece plus the stacked blocks.
3. Every piece is packed by a few greedy orders at once (one engine run per order over all
   pieces: the engine only looks at blocks live at a common step, so a run over all of
   them packs each piece as a run over it alone would). Each piece keeps its best order;
   the orders are `planner.orders.PIECE_ORDERS`.
4. Within a time budget, the exact search (`planner.exact.minimise`) tightens the highest
   piece while it has at most `MAX_SEARCH_BLOCKS` blocks, then the next highest.

A lower bound follows from the pieces: a plan of the whole, restricted to one piece and the
stacked blocks, packs them together, and closing up the stacked blocks' bytes packs the
piece alone (alignment kept when every stacked size is a multiple of the piece's
alignments). So the stacked bytes plus any piece's proven bound bound every plan, LOAD
being the same with each piece's LOAD.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.bounds import load_of, segments_of
from planner.exact.driver import Budget, minimise
from planner.exact.model import Model
from planner.orders import PIECE_ORDERS, by
from planner.placement import Blocks, Placer
from planner.problem import Problem

MAX_SEARCH_BLOCKS = 3000  # the exact search tightens pieces of at most this many blocks


@dataclass
class Split:
    """The blocks of one pool (by block index): stacked on top, pieces, and empty ones."""

    everywhere: np.ndarray  # live at every step where a block lives, in index order
    piece: np.ndarray  # each block's piece (-1: stacked or empty)
    count: int  # number of pieces


@dataclass
class Packing:
    """Offsets of every block of a pool, how high each piece reaches, and what is proven."""

    offsets: np.ndarray
    heights: np.ndarray  # by piece
    stacked: int  # bytes above the highest piece taken by the stacked blocks (with padding)
    bound: int  # a proven lower bound on any plan of the blocks
    orders: dict[str, int] = field(default_factory=dict)  # pieces packed best by each order
    searched: int = 0  # pieces tightened by the exact search
    proven: int = 0  # of which proven optimal
    nodes: int = 0  # search nodes spent
    stacked_count: int = 0  # blocks stacked on top
    runs: int = 0  # greedy orders run

    @property
    def arena(self) -> int:
        return int(self.heights.max(initial=0)) + self.stacked


def split(blocks: Blocks) -> Split:
    """Stacked blocks, and the pieces of the others between cut lines."""
    sized = blocks.size > 0
    n = len(blocks)
    piece = np.full(n, -1, dtype=np.int64)
    if not sized.any():
        return Split(np.zeros(0, dtype=np.int64), piece, 0)
    start, stop = int(blocks.first[sized].min()), int(blocks.last[sized].max())
    everywhere = sized & (blocks.first <= start) & (blocks.last >= stop)
    # A group whose height changes is not its full size throughout: it stays in a piece.
    everywhere[list(blocks.profiles)] = False
    rest = np.flatnonzero(sized & ~everywhere)
    if rest.size:
        order = rest[by(blocks.first[rest])]
        reach = np.maximum.accumulate(blocks.last[order])
        cut = np.concatenate(([False], blocks.first[order][1:] > reach[:-1]))
        piece[order] = np.cumsum(cut)
    return Split(np.flatnonzero(everywhere), piece, int(piece.max(initial=-1)) + 1)


def pack(problem: Problem, blocks: Blocks, deadline: float, *, search: bool, max_nodes: int | None = None) -> Packing:
    """Pack the blocks of a single-pool problem in pieces (see the module's steps).

    Runs at least the first greedy order whatever the deadline; another one only when the
    time left covers a pass as long as the average so far and some piece is above its
    LOAD; the search until the deadline.
    """
    parts = split(blocks)
    members = np.flatnonzero(parts.piece >= 0)
    sub = blocks.subset(members, [(0,)] * len(members))
    label = parts.piece[members]
    offsets = np.zeros(len(blocks), dtype=np.int64)
    heights = np.zeros(parts.count, dtype=np.int64)
    won = np.full(parts.count, -1, dtype=np.int64)
    orders = {name: (order.of(sub), rule) for name, order, rule in PIECE_ORDERS} if len(sub) else {}
    names = list(orders)
    bounds = _piece_loads(sub, label, parts.count)
    runs, begun = 0, time.perf_counter()
    for k, (order, rule) in enumerate(orders.values()):
        now = time.perf_counter()
        if runs and (deadline - now < (now - begun) / runs or bool(np.all(heights <= bounds))):
            break  # no time for one more pass, or every piece down to its LOAD
        runs += 1
        placer = Placer(problem, sub)
        placer.place_all(order, rule=rule)
        reach = np.zeros(parts.count, dtype=np.int64)
        np.maximum.at(reach, label, placer.offset + sub.size)
        better = (won < 0) | (reach < heights)
        heights[better], won[better] = reach[better], k
        take = better[label]
        offsets[members[take]] = placer.offset[take]
    wins = {name: int((won == k).sum()) for k, name in enumerate(names) if (won == k).any()}
    found = Packing(offsets, heights, 0, 0, wins, runs=runs)
    if search:
        budget = Budget(deadline=deadline, max_nodes=max_nodes)
        _tighten(blocks, parts, members, found, bounds, budget)
        found.nodes = budget.nodes
    _stack(blocks, parts.everywhere, found)
    stacked_bytes = int(blocks.size[parts.everywhere].sum())
    whole = load_of(*blocks.pieces()[1:], problem.steps)
    aligns = np.unique(sub.align)
    closes_up = bool(np.all(blocks.size[parts.everywhere][:, None] % aligns[None, :] == 0))
    found.bound = max(whole, stacked_bytes + int(bounds.max(initial=0))) if closes_up else whole
    return found


def _piece_loads(sub: Blocks, label: np.ndarray, count: int) -> np.ndarray:
    """LOAD of each piece. Pieces share no step, so the live curve of all of them together
    is, over each piece's steps, that piece's own curve."""
    out = np.zeros(count, dtype=np.int64)
    if not len(sub):
        return out
    steps = int(sub.last.max()) + 1
    points, values = segments_of(*sub.pieces()[1:], steps)
    starts = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(starts, label, sub.first)
    owner = np.searchsorted(starts, points, side="right") - 1
    np.maximum.at(out, owner[owner >= 0], values[owner >= 0])
    return out


def _tighten(
    blocks: Blocks, parts: Split, members: np.ndarray, found: Packing, bounds: np.ndarray, budget: Budget
) -> None:
    """The exact search on the highest pieces in turn, while it can lower the arena."""
    searched: set[int] = set()
    label = parts.piece[members]
    while not budget.spent():
        k = int(found.heights.argmax())
        if k in searched or found.heights[k] <= bounds[k]:
            return  # the highest piece is as low as the search can take it
        searched.add(k)
        chosen = members[label == k]
        if len(chosen) > MAX_SEARCH_BLOCKS:
            return
        model = model_of(blocks, chosen)
        result = minimise(model, found.offsets[chosen], budget)
        found.searched += 1
        found.proven += result.status == "optimal"
        bounds[k] = max(int(bounds[k]), result.lower_bound)
        assert result.offsets is not None  # minimise keeps the incumbent at worst
        height = model.height(result.offsets)
        if height < found.heights[k]:
            found.offsets[chosen] = result.offsets
            found.heights[k] = height


def _stack(blocks: Blocks, everywhere: np.ndarray, found: Packing) -> None:
    """Put the blocks live everywhere one above the other, over the highest piece."""
    base = top = int(found.heights.max(initial=0))
    for i, size, align in zip(
        everywhere.tolist(), blocks.size[everywhere].tolist(), blocks.align[everywhere].tolist(), strict=True
    ):
        at = -(-top // align) * align
        found.offsets[i] = at
        top = at + size
    found.stacked = top - base
    found.stacked_count = len(everywhere)


def model_of(blocks: Blocks, chosen: np.ndarray) -> Model:
    """The exact search's model of the blocks at `chosen` (sized ones), profiles included."""
    profiles = {k: blocks.profiles[i] for k, i in enumerate(chosen.tolist()) if i in blocks.profiles}
    return Model.of(blocks.size[chosen], blocks.first[chosen], blocks.last[chosen], blocks.align[chosen], profiles)
