"""Offset assignment, one buffer at a time: the engine most strategies share.

Strategies differ in the *order* they place buffers in and the *rule* that picks an offset
among the gaps left by already-placed buffers that are live at a common step:

- ``first``: the lowest gap that fits (ONE's first-fit, TVM USMP's greedy).
- ``best``: the smallest gap that fits, else above everything (TensorFlow Lite, XLA).
- ``top``: above every buffer already in the pool, whatever its lifetime (no reuse).

The engine also owns what every strategy must get right the same way: buffers that alias
another (``alias_of``) are placed as one block with their root; offsets honour alignment;
a buffer goes to the first of its candidate pools where it fits under the capacity.

An alias group's block has a size that changes over time, its profile
(`planner.aliases.profile`): pieces (first, last, height) over its span. The engine indexes
pieces, not blocks (a block of one piece is its own piece), so that later blocks see each
piece's own bytes. A block of several pieces may take offset ``o`` when no placed bytes
``[a, b)`` live during piece j's steps meet ``[o, o + height_j)``, that is when ``o`` is in
none of the ranges ``(a - height_j, b)``: those ranges, gathered over its pieces, go to
the same gap picking as a one-piece block's (a block one byte tall among them).

No pairwise scan: the gaps come from `planner.timeline` (unions of byte ranges over a
segment tree of the schedule), or, for blocks placed in first-use order, from the sweep of
`planner.sweep`. A single pool (the usual case) is placed in one loop over per-block facts
read in placing order; several pools one block at a time through `place`.
"""

from __future__ import annotations

import gc
import time
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from planner import timeline_jit
from planner.blocks import Blocks
from planner.bounds import load_of, naive_of
from planner.errors import InfeasibleError
from planner.plan import Placement, Plan
from planner.problem import Problem
from planner.sweep import sweep
from planner.timeline import Occupancy, Timeline, pick

RULES = ("first", "best", "top")
_NO_CAPACITY = np.iinfo(np.int64).max // 4


class Placer:
    """Places blocks one at a time; reads back a `Plan`.

    The gaps a block may take are those between the bytes of the placed blocks live at a
    common step with it, which `planner.timeline` finds without visiting those blocks one
    by one. Empty blocks take no bytes: they sit at offset 0 and are nobody's neighbour.
    """

    def __init__(self, problem: Problem, blocks: Blocks | None = None) -> None:
        self.problem = problem
        self.blocks = blocks if blocks is not None else Blocks.of(problem)
        b = self.blocks
        n = len(b)
        self.capacity = [p.capacity if p.capacity is not None else _NO_CAPACITY for p in problem.pools]
        self.pool = np.full(n, -1, dtype=np.int64)  # -1: not placed yet
        self.offset = np.zeros(n, dtype=np.int64)
        self.top = [0] * len(problem.pools)  # highest end in each pool
        # The occupancy indexes pieces ("units"): block i's are units[i] to units[i + 1] - 1,
        # or unit i alone when no block has a profile of several pieces (units None).
        self._units: list[int] | None = None
        self._heights: list[int] = []
        if b.profiles:
            owner, first, last, height = b.pieces()
            self._units = np.searchsorted(owner, np.arange(n + 1)).tolist()
            self._heights = height.tolist()
            self._timeline = Timeline(first, last, height > 0)
        else:
            self._timeline = Timeline(b.first, b.last, b.size > 0)
        # Python-level copies: indexing numpy arrays one element at a time is slow.
        self._size = array("q", b.size.astype(np.int64).tobytes())
        self._align = array("q", b.align.astype(np.int64).tobytes())
        self._occupancy: list[Occupancy] = []
        self._stale = True  # the occupancy does not reflect `pool` and `offset` yet

    def reset(self) -> None:
        self.pool.fill(-1)
        self.top = [0] * len(self.top)
        self._stale = True

    # ---- queries ----------------------------------------------------------------------

    def _fresh(self) -> list[Occupancy]:
        """The occupancy of every pool, rebuilt from `pool` and `offset` when they changed
        behind its back (first use, reset, unplace, restore)."""
        if not self._stale:
            return self._occupancy
        t = self._timeline
        wants = array("i", t.wants.tobytes())  # shared: the queries are the same in every pool
        self._occupancy = [Occupancy(t, wants) for _ in self.top]
        placed = np.flatnonzero((self.pool >= 0) & (self.blocks.size > 0)).tolist()
        units = placed if self._units is None else [u for i in placed for u, _ in self._pieces(i)]
        answered = [u for u in units if t.hi[u] - t.lo[u] >= t.short]
        for u in answered:
            self._occupancy[0].answered(u, self._occupancy)
        for occupancy in self._occupancy:
            occupancy.open = t.long_queries - len(answered)
        for i in placed:
            start = int(self.offset[i])
            occupancy = self._occupancy[int(self.pool[i])]
            if self._units is None:
                occupancy.insert(i, start, start + self._size[i])
            else:
                for u, height in self._pieces(i):
                    occupancy.insert(u, start, start + height)
        self._stale = False
        return self._occupancy

    def _pieces(self, i: int) -> list[tuple[int, int]]:
        """(unit, height) of each piece of block `i` (with units)."""
        assert self._units is not None
        heights = self._heights
        return [(u, heights[u]) for u in range(self._units[i], self._units[i + 1]) if heights[u]]

    def choose(self, i: int, pool: int, rule: str) -> int:
        """The offset `rule` picks for block `i` in `pool`, ignoring capacity."""
        size, align = self._size[i], self._align[i]
        if size == 0:
            return 0
        if rule == "top":
            return _align_up(self.top[pool], align)
        occupancy = self._fresh()[pool]
        if self._units is None:
            return pick(occupancy.taken(i), size, align, rule == "best")
        if i not in self.blocks.profiles:
            return pick(occupancy.taken(self._units[i]), size, align, rule == "best")
        # Offset o clashes with bytes [a, b) taken during a piece of height h when
        # a - h < o < b: ranges [a - h + 1, b) that a block one byte tall must avoid.
        ranges: list[int] = []
        for u, height in self._pieces(i):
            taken = occupancy.taken(u)
            for k in range(0, len(taken), 2):
                ranges += (taken[k] - height + 1, taken[k + 1])
        return pick(ranges, 1, align, rule == "best")

    # ---- placing ----------------------------------------------------------------------

    def place(self, i: int, rule: str = "first") -> None:
        """Put block `i` in its first candidate pool where `rule`'s offset fits the capacity."""
        size = self._size[i]
        candidates = self.blocks.candidates[i]
        for pool in candidates:
            offset = self.choose(i, pool, rule)
            if offset + size <= self.capacity[pool]:
                self._commit(i, pool, offset)
                return
        # Fits nowhere: put it in the last candidate anyway, so that the failure can name
        # the pool and the real shortfall once the whole plan is known.
        pool = candidates[-1]
        self._commit(i, pool, self.choose(i, pool, rule))

    def place_at(self, i: int, pool: int, offset: int) -> None:
        """Put block `i` at a given offset (for strategies that compute offsets themselves)."""
        self._commit(i, pool, offset)

    def place_every(self, offsets: np.ndarray) -> None:
        """Put every block at the given offsets in the only pool (for strategies that
        compute a whole single-pool packing themselves)."""
        self.pool[:] = 0
        self.offset[:] = offsets
        sized = self.blocks.size > 0
        self.top[0] = int((self.offset + self.blocks.size)[sized].max(initial=0))
        self._stale = True

    def _commit(self, i: int, pool: int, offset: int) -> None:
        self.pool[i] = pool
        self.offset[i] = offset
        size = self._size[i]
        if size == 0:
            return
        end = offset + size
        if end > self.top[pool]:
            self.top[pool] = end
        if self._stale:
            return  # nothing asked for gaps yet: the occupancy is built when first needed
        t = self._timeline
        for u, height in [(i, size)] if self._units is None else self._pieces(i):
            if t.hi[u] - t.lo[u] >= t.short:
                self._occupancy[pool].answered(u, self._occupancy)
                for occupancy in self._occupancy:
                    occupancy.open -= 1
            self._occupancy[pool].insert(u, offset, offset + height)

    def unplace(self, blocks: np.ndarray) -> None:
        """Take blocks out again (for local search), lowering the pool tops to match."""
        self.pool[blocks] = -1
        ends = self.offset + self.blocks.size
        for k in range(len(self.top)):
            mine = self.pool == k
            self.top[k] = int(ends[mine].max()) if mine.any() else 0
        self._stale = True

    def place_all(
        self, order: Iterable[int] | np.ndarray, rule: str = "first", *, give_up_above: int | None = None
    ) -> bool:
        """Place blocks in `order`. With `give_up_above`, stop as soon as the pools together
        grow past that many bytes (a search rejecting the result anyway); False then."""
        if rule not in RULES:
            raise ValueError(f"rule: {rule!r} is not one of {RULES}")
        with _collector_paused():
            if len(self.top) == 1:
                return self._run(np.asarray(order, dtype=np.int64), rule, give_up_above)
            for i in order:
                self.place(int(i), rule)
                if give_up_above is not None and sum(self.top) > give_up_above:
                    return False
        return True

    def place_best_of(self, orders: dict[str, np.ndarray], rule: str) -> str:
        """Place every block in each of `orders` in turn and keep the placement with the
        smallest arena (a feasible one first; ties: the earlier order); its name.

        An order is given up once the pools together reach a feasible kept arena: it can no
        longer win, so the placement kept is the one that placing every order whole gives
        (XLA's best fit tries two orders; how early the losing one stops at scale:
        docs/BENCHMARKS.md, "Figures behind the code")."""
        kept: tuple[bool, int, int, str, tuple[np.ndarray, np.ndarray, list[int]]] | None = None
        for rank, (name, order) in enumerate(orders.items()):
            self.reset()
            bound = None if kept is None or kept[0] else kept[1] - 1
            if not self.place_all(order, rule, give_up_above=bound):
                continue  # reached the kept arena
            if kept is None or (not self.feasible, self.arena_bytes, rank) < kept[:3]:
                kept = (not self.feasible, self.arena_bytes, rank, name, self.snapshot())
        if kept is None:
            raise ValueError("place_best_of() needs at least one order")
        self.restore(kept[4])
        return kept[3]

    def _run(self, order: np.ndarray, rule: str, give_up_above: int | None) -> bool:
        """`place_all` for a single pool, where the capacity never changes an offset: the
        same placements, with the per-block facts read in placing order."""
        limit = _NO_CAPACITY if give_up_above is None else give_up_above
        b = self.blocks
        sizes, aligns = b.size[order].tolist(), b.align[order].tolist()
        if rule == "top":
            offsets, top = _stack(sizes, aligns, self.top[0], limit)
            self._stale = True  # stacking kept no occupancy
        elif self._units is not None:
            return self._run_pieces(order, rule == "best", limit)
        elif not (self.pool >= 0).any() and bool(np.all(np.diff(b.first[order]) >= 0)):
            spans = zip(b.first[order].tolist(), b.last[order].tolist(), sizes, aligns, strict=True)
            offsets, top = sweep(list(spans), rule == "best", limit)
            self._stale = True  # the sweep kept no occupancy
        elif not (self.pool >= 0).any() and (
            ran := timeline_jit.run(self._timeline, order, b.size[order], b.align[order], rule == "best", limit)
        ):
            offsets, top = ran
            self._stale = True  # the compiled run kept no occupancy
        else:
            t = self._timeline
            los = np.frombuffer(t.lo, dtype=np.int64)[order].tolist()
            his = np.frombuffer(t.hi, dtype=np.int64)[order].tolist()
            facts = zip(order.tolist(), sizes, aligns, los, his, strict=True)
            offsets, top = self._fresh()[0].place_run(facts, rule == "best", self.top[0], limit, self._occupancy)
        return self._keep(order, offsets, top, limit)

    def _run_pieces(self, order: np.ndarray, best: bool, limit: int) -> bool:
        """`_run` when blocks have pieces: runs of one-piece blocks through the occupancy's
        `place_run` (by unit), blocks of several pieces one by one."""
        occupancy = self._fresh()[0]
        t, units, profiles, b = self._timeline, self._units, self.blocks.profiles, self.blocks
        assert units is not None
        rule = "best" if best else "first"
        blocks = order.tolist()
        offsets: list[int] = []
        top, k = self.top[0], 0
        while k < len(blocks) and top <= limit:
            j = k
            while j < len(blocks) and blocks[j] not in profiles:
                j += 1
            if j > k:
                run = order[k:j]
                unit = [units[i] for i in blocks[k:j]]
                facts = zip(
                    unit,
                    b.size[run].tolist(),
                    b.align[run].tolist(),
                    [t.lo[u] for u in unit],
                    [t.hi[u] for u in unit],
                    strict=True,
                )
                placed, top = occupancy.place_run(facts, best, top, limit, self._occupancy)
                offsets += placed
                if top > limit:
                    break
            if j < len(blocks):
                i = blocks[j]
                at = self.choose(i, 0, rule)
                self.top[0] = top
                self._commit(i, 0, at)
                top = self.top[0]
                offsets.append(at)
            k = j + 1
        return self._keep(order, offsets, top, limit)

    def _keep(self, order: np.ndarray, offsets: list[int], top: int, limit: int) -> bool:
        done = order[: len(offsets)]
        self.pool[done] = 0
        self.offset[done] = offsets
        self.top[0] = top
        return top <= limit

    # ---- results ----------------------------------------------------------------------

    @property
    def arena_bytes(self) -> int:
        return sum(self.top)

    @property
    def feasible(self) -> bool:
        return all(top <= cap for top, cap in zip(self.top, self.capacity, strict=False))

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        return self.pool.copy(), self.offset.copy(), list(self.top)

    def restore(self, state: tuple[np.ndarray, np.ndarray, list[int]]) -> None:
        pool, offset, top = state
        self.pool, self.offset, self.top = pool.copy(), offset.copy(), list(top)
        self._stale = True

    def plan(self, strategy: str, started: float, **stats: Any) -> Plan:
        """The plan of everything placed; raises `InfeasibleError` if a pool overflowed."""
        if (self.pool < 0).any():
            missing = self.blocks.ids[int(np.flatnonzero(self.pool < 0)[0])]
            raise AssertionError(f"{strategy} left buffer {missing!r} unplaced")
        pools = self.problem.pools
        for k, (top, cap) in enumerate(zip(self.top, self.capacity, strict=False)):
            if top > cap:
                raise InfeasibleError(pools[k].name, top, cap, strategy)
        with _collector_paused():
            offsets = self._placements()
        return Plan(
            strategy=strategy,
            offsets=offsets,
            pool_sizes={p.name: self.top[k] for k, p in enumerate(pools)},
            lower_bound=load_of(*self.blocks.pieces()[1:], self.problem.steps),
            naive=naive_of(self.blocks.size),
            elapsed_s=time.perf_counter() - started,
            stats=stats,
            alias_groups=self._alias_groups(),
        )

    def _alias_groups(self) -> dict[str, tuple[str, ...]]:
        """Root id -> ids of the buffers of every block of more than one buffer."""
        if self.blocks.members is None:
            return {}
        bufs = self.problem.buffers
        return {
            root: tuple(bufs[i].id for i, _ in members)
            for root, members in zip(self.blocks.ids, self.blocks.members, strict=True)
            if len(members) > 1
        }

    def _placements(self) -> dict[str, Placement]:
        """Where each buffer sits, in the problem's order."""
        bufs = self.problem.buffers
        names = [p.name for p in self.problem.pools]
        where = zip(self.pool.tolist(), self.offset.tolist(), strict=True)
        if self.blocks.members is None:
            return {b.id: Placement(names[k], at) for b, (k, at) in zip(bufs, where, strict=True)}
        found: dict[str, Placement] = {}
        for members, (k, base) in zip(self.blocks.members, where, strict=True):
            for i, delta in members:
                found[bufs[i].id] = Placement(names[k], base + delta)
        return {b.id: found[b.id] for b in bufs}


def _stack(sizes: list[int], aligns: list[int], top: int, limit: int) -> tuple[list[int], int]:
    """Offsets of blocks put one above the other from `top` up (the "top" rule)."""
    offsets = []
    for size, align in zip(sizes, aligns, strict=True):
        if size == 0:
            offsets.append(0)
            continue
        at = top if align == 1 else -(-top // align) * align
        offsets.append(at)
        top = at + size
        if top > limit:
            break
    return offsets, top


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: placing allocates millions of small lists
    that never form cycles, and each collection would walk the whole heap again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _align_up(value: int, align: int) -> int:
    return -(-value // align) * align
