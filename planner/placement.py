"""Offset assignment, one buffer at a time: the engine most strategies share.

Strategies differ in the *order* they place buffers in and the *rule* that picks an offset
among the gaps left by already-placed buffers that are live at a common step:

- ``first``: the lowest gap that fits (ONE's first-fit, TVM USMP's greedy).
- ``best``: the smallest gap that fits, else above everything (TensorFlow Lite, XLA).
- ``top``: above every buffer already in the pool, whatever its lifetime (no reuse).

The engine also owns what every strategy must get right the same way: buffers that alias
another (``alias_of``) are placed as one block with their root; offsets honour alignment;
a buffer goes to the first of its candidate pools where it fits under the capacity.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.aliases import alias_roots
from planner.bounds import load, naive
from planner.errors import InfeasibleError
from planner.plan import Placement, Plan
from planner.problem import Problem

RULES = ("first", "best", "top")
_NO_CAPACITY = np.iinfo(np.int64).max // 4
_EMPTY = np.empty(0, dtype=np.int64)
_ZERO = np.zeros(1, dtype=np.int64)


@dataclass(frozen=True)
class Blocks:
    """The problem's buffers with alias groups merged into single blocks.

    Block ``i`` covers the union of its members' live ranges and is as large as its
    largest member end (``alias_offset + size``). Arrays are indexed by block.
    """

    ids: list[str]  # the root buffer's id
    members: list[list[tuple[int, int]]]  # (buffer index, byte offset within the block)
    first: np.ndarray
    last: np.ndarray
    size: np.ndarray
    align: np.ndarray
    candidates: list[tuple[int, ...]]  # pool indices in order of preference

    @classmethod
    def of(cls, problem: Problem) -> Blocks:
        bufs = problem.buffers
        pool_index = {p.name: k for k, p in enumerate(problem.pools)}
        if all(b.alias_of is None for b in bufs):
            # The common case, kept vectorised: every buffer is its own block.
            return cls(
                ids=[b.id for b in bufs],
                members=[[(i, 0)] for i in range(len(bufs))],
                first=np.array([b.first for b in bufs], dtype=np.int64),
                last=np.array([b.last for b in bufs], dtype=np.int64),
                size=np.array([b.size for b in bufs], dtype=np.int64),
                align=np.array([problem.align_of(b) for b in bufs], dtype=np.int64),
                candidates=[tuple(pool_index[n] for n in problem.candidates(b)) for b in bufs],
            )
        index: dict[int, int] = {}
        ids: list[str] = []
        members: list[list[tuple[int, int]]] = []
        for i, (root, delta) in enumerate(alias_roots(problem)):
            if root not in index:
                index[root] = len(ids)
                ids.append(bufs[root].id)
                members.append([])
            members[index[root]].append((i, delta))
        return cls(
            ids=ids,
            members=members,
            first=np.array([min(bufs[i].first for i, _ in m) for m in members], dtype=np.int64),
            last=np.array([max(bufs[i].last for i, _ in m) for m in members], dtype=np.int64),
            size=np.array([max(d + bufs[i].size for i, d in m) for m in members], dtype=np.int64),
            align=np.array([max(problem.align_of(bufs[i]) for i, _ in m) for m in members], dtype=np.int64),
            candidates=[tuple(pool_index[n] for n in problem.candidates(bufs[m[0][0]])) for m in members],
        )

    def __len__(self) -> int:
        return len(self.ids)

    def conflict_counts(self) -> np.ndarray:
        """For each block, how many other blocks are live at a common step."""
        order = np.argsort(self.first, kind="stable")
        sorted_first = self.first[order]
        last_sorted = np.sort(self.last)
        # Blocks starting at or before my last step, minus those ending before my first.
        starts_before_end = np.searchsorted(sorted_first, self.last, side="right")
        ends_before_start = np.searchsorted(last_sorted, self.first, side="left")
        return (starts_before_end - ends_before_start - 1).astype(np.int64)


class Placer:
    """Places blocks one at a time; reads back a `Plan`.

    Finding the placed blocks live together with a query is the inner loop. When the
    conflict graph is small enough it is built once, as adjacency lists (local search
    re-places blocks many times). Otherwise blocks are kept sorted by first step, so the
    candidates lie in a window of that order; blocks much longer than most are kept apart
    and always scanned, which keeps the window short.
    """

    MAX_EDGES = 4_000_000

    def __init__(self, problem: Problem, blocks: Blocks | None = None) -> None:
        self.problem = problem
        self.blocks = blocks or Blocks.of(problem)
        b = self.blocks
        n = len(b)
        self.capacity = [p.capacity if p.capacity is not None else _NO_CAPACITY for p in problem.pools]
        self.pool = np.full(n, -1, dtype=np.int64)  # -1: not placed yet
        self.offset = np.zeros(n, dtype=np.int64)
        self._end = np.zeros(n, dtype=np.int64)  # offset + size, kept with offset
        self.top = [0] * len(problem.pools)  # highest end in each pool
        length = b.last - b.first
        window = int(np.quantile(length, 0.99)) if n else 0
        self._long = np.flatnonzero(length > window)
        short = np.flatnonzero(length <= window)
        self._short = short[np.argsort(b.first[short], kind="stable")]
        self._short_first = b.first[self._short]
        self._window = window
        self._adjacency = _conflict_graph(b.first, b.last, self.MAX_EDGES)
        # Python ints for per-block scalars: indexing numpy arrays one at a time is slow.
        self._first = b.first.tolist()
        self._last = b.last.tolist()
        self._size = b.size.tolist()
        self._align = b.align.tolist()

    def reset(self) -> None:
        self.pool.fill(-1)
        self.top = [0] * len(self.top)

    # ---- queries ----------------------------------------------------------------------

    def _conflicts(self, i: int, pool: int) -> np.ndarray:
        """Indices of placed blocks in `pool` live at a common step with block `i`."""
        if self._adjacency is not None:
            indptr, indices = self._adjacency
            near = indices[indptr[i] : indptr[i + 1]]
            return near[self.pool[near] == pool]
        b = self.blocks
        first, last = self._first[i], self._last[i]
        lo = self._short_first.searchsorted(first - self._window, side="left")
        hi = self._short_first.searchsorted(last, side="right")
        near = self._short[lo:hi]
        near = near[(self.pool[near] == pool) & (b.last[near] >= first)]
        if self._long.size:
            far = self._long
            far = far[(self.pool[far] == pool) & (b.first[far] <= last) & (b.last[far] >= first)]
            if far.size:
                near = np.concatenate((near, far))
        return near[near != i]

    def gaps(self, i: int, pool: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Free gaps for block `i` in `pool`: (starts, ends) of bounded gaps, and the top.

        Gaps are in increasing offset order; the top gap starts at the top returned and
        is unbounded but for the pool's capacity.
        """
        found = self._conflicts(i, pool)
        if found.size == 0:
            return _EMPTY, _EMPTY, 0
        off = self.offset[found]
        order = off.argsort(kind="stable")
        off = off[order]
        reach = np.maximum.accumulate(self._end[found[order]])
        starts = np.concatenate((_ZERO, reach[:-1]))
        return starts, off, int(reach[-1])

    def choose(self, i: int, pool: int, rule: str) -> int:
        """The offset `rule` picks for block `i` in `pool`, ignoring capacity."""
        size, align = self._size[i], self._align[i]
        if rule == "top":
            return _align_up(self.top[pool], align)
        starts, ends, top = self.gaps(i, pool)
        if starts.size:
            aligned = starts if align == 1 else -(-starts // align) * align
            fits = aligned + size <= ends
            if rule == "first":
                k = int(fits.argmax())
                if fits[k]:
                    return int(aligned[k])
            elif fits.any():
                slack = np.where(fits, ends - starts, _NO_CAPACITY)
                return int(aligned[slack.argmin()])
        return _align_up(top, align)

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

    def _commit(self, i: int, pool: int, offset: int) -> None:
        self.pool[i] = pool
        self.offset[i] = offset
        self._end[i] = offset + self._size[i]
        self.top[pool] = max(self.top[pool], offset + self._size[i])

    def unplace(self, blocks: np.ndarray) -> None:
        """Take blocks out again (for local search), lowering the pool tops to match."""
        self.pool[blocks] = -1
        ends = self._end
        for k in range(len(self.top)):
            mine = self.pool == k
            self.top[k] = int(ends[mine].max()) if mine.any() else 0

    def place_all(
        self, order: Iterable[int] | np.ndarray, rule: str = "first", *, give_up_above: int | None = None
    ) -> bool:
        """Place blocks in `order`. With `give_up_above`, stop as soon as the pools together
        grow past that many bytes (a search rejecting the result anyway); False then."""
        for i in order:
            self.place(int(i), rule)
            if give_up_above is not None and sum(self.top) > give_up_above:
                return False
        return True

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
        self._end = self.offset + self.blocks.size

    def plan(self, strategy: str, started: float, **stats: Any) -> Plan:
        """The plan of everything placed; raises `InfeasibleError` if a pool overflowed."""
        if (self.pool < 0).any():
            missing = self.blocks.ids[int(np.flatnonzero(self.pool < 0)[0])]
            raise AssertionError(f"{strategy} left buffer {missing!r} unplaced")
        pools = self.problem.pools
        for k, (top, cap) in enumerate(zip(self.top, self.capacity, strict=False)):
            if top > cap:
                raise InfeasibleError(pools[k].name, top, cap, strategy)
        offsets: dict[str, Placement] = {}
        bufs = self.problem.buffers
        for block, members in enumerate(self.blocks.members):
            name, base = pools[int(self.pool[block])].name, int(self.offset[block])
            for i, delta in members:
                offsets[bufs[i].id] = Placement(name, base + delta)
        ordered = {b.id: offsets[b.id] for b in bufs}
        return Plan(
            strategy=strategy,
            offsets=ordered,
            pool_sizes={p.name: self.top[k] for k, p in enumerate(pools)},
            lower_bound=load(self.problem),
            naive=naive(self.problem),
            elapsed_s=time.perf_counter() - started,
            stats=stats,
        )


def _conflict_graph(first: np.ndarray, last: np.ndarray, max_edges: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Adjacency lists (CSR) of blocks live at a common step, or None past `max_edges`.

    In first-step order, the blocks that start within block i's lifetime after it are a
    contiguous run; every conflicting pair appears in exactly one such run.
    """
    n = len(first)
    order = np.argsort(first, kind="stable")
    sorted_first = first[order]
    stop = np.searchsorted(sorted_first, last[order], side="right")
    counts = stop - np.arange(n) - 1
    pairs = int(counts.sum())
    if 2 * pairs > max_edges:
        return None
    src_pos = np.repeat(np.arange(n), counts)
    # Position of each partner: src + 1, src + 2, ... within its run.
    run_start = np.repeat(np.cumsum(counts) - counts, counts)
    dst_pos = src_pos + 1 + (np.arange(pairs) - run_start)
    src, dst = order[src_pos], order[dst_pos]
    both_src = np.concatenate((src, dst))
    both_dst = np.concatenate((dst, src))
    by_src = np.argsort(both_src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(both_src, minlength=n), out=indptr[1:])
    return indptr, both_dst[by_src]


def _align_up(value: int, align: int) -> int:
    return -(-value // align) * align
