"""The independent checker: is a plan valid for a problem?

It shares no code with the strategies or the placement engine, so a bug there cannot hide
itself here. Every strategy test and the runtime (before it executes) call it.

A plan is valid when
1. every buffer of the problem has exactly one placement, in a pool it may use;
2. every offset is >= 0 and a multiple of the buffer's alignment (its own or the problem's);
3. every buffer ends within its pool's capacity;
4. each pool's size equals the highest end of the buffers in it;
5. no two buffers live at a common step overlap in bytes, unless one aliases the other
   (then it sits exactly `alias_offset` bytes into the buffer it aliases).

Conditions 1-4 take one pass over the buffers; condition 5 a sweep over the steps with the
live buffers ordered by byte (O(n log n) for n buffers), which only detects overlaps: when
it finds one, every overlapping pair is enumerated, so that the report counts and names
them.
"""

from __future__ import annotations

import gc
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from operator import attrgetter
from typing import cast

import numpy as np

from planner.plan import Placement, Plan
from planner.problem import Buffer, Pool, Problem

MAX_REPORTED = 20
_SHIFT = 9  # the sweep's live set keeps ranks in buckets of 512
_UNBOUNDED = 2**62


@dataclass
class CheckResult:
    violations: list[str] = field(default_factory=list)
    total: int = 0  # violations found, of which at most MAX_REPORTED are kept

    @property
    def ok(self) -> bool:
        return self.total == 0

    def add(self, message: str) -> None:
        self.total += 1
        if len(self.violations) < MAX_REPORTED:
            self.violations.append(message)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.ok:
            return "valid"
        more = f" (+{self.total - len(self.violations)} more)" if self.total > len(self.violations) else ""
        return "; ".join(self.violations) + more


def check_plan(problem: Problem, plan: Plan) -> CheckResult:
    """Check conditions 1-5 (see the module docstring); O(n log n) for n buffers when the
    plan is valid. Overlaps are detected by a sweep; when there are some, every overlapping
    pair is enumerated to count and name them."""
    # The cyclic collector is paused: the check makes lists of a million items that form
    # no cycles, and each full collection would walk the problem and plan again.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _check(problem, plan)
    finally:
        if was_enabled:
            gc.enable()


def _check(problem: Problem, plan: Plan) -> CheckResult:
    result = CheckResult()
    pools = {p.name: p for p in problem.pools}
    bufs = problem.buffers
    offsets = plan.offsets
    ids = list(map(_ID, bufs))
    found = list(map(offsets.get, ids))
    missing = found.count(None)
    if len(offsets) > len(bufs) - missing:
        for extra in sorted(set(offsets) - set(ids)):
            result.add(f"plan places {extra!r}, which is not a buffer of the problem")
    placed = list(bufs)
    where = [w for w in found if w is not None] if missing else cast(list[Placement], found)
    if missing:
        placed = [b for b, w in zip(bufs, found, strict=True) if w is not None]
        for b, w in zip(bufs, found, strict=True):
            if w is None:
                result.add(f"buffer {b.id!r} has no placement")
    highest, columns = _check_places(problem, placed, where, result)
    for name in pools:
        claimed = plan.pool_sizes.get(name, 0)
        if claimed != highest[name]:
            result.add(f"pool {name!r} is said to be {claimed} bytes but its highest buffer ends at {highest[name]}")
    aliased = any(b.alias_of is not None for b in bufs)
    if aliased:
        _check_aliases(problem, plan, result)
    if _any_overlap(problem, placed, columns, aliased):
        _report_overlaps(problem, plan, placed, result)
    return result


_ID, _SIZE, _FIRST, _LAST = attrgetter("id"), attrgetter("size"), attrgetter("first"), attrgetter("last")
_POOL, _OFFSET = attrgetter("pool"), attrgetter("offset")


def _check_places(
    problem: Problem, placed: list[Buffer], where: list[Placement], result: CheckResult
) -> tuple[dict[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Conditions 1-3 for each placed buffer; the highest end in each pool, and the
    columns (pool index among the pools named, sorted; offset; size) of the placed buffers."""
    pools = {p.name: p for p in problem.pools}
    every = tuple(pools)
    highest: dict[str, int] = {name: 0 for name in pools}
    n = len(placed)
    offset = np.array(list(map(_OFFSET, where)), dtype=np.int64).reshape(n)
    size = np.array(list(map(_SIZE, placed)), dtype=np.int64).reshape(n)
    own = np.array([a or 1 for a in map(attrgetter("alignment"), placed)], dtype=np.int64).reshape(n)
    align = np.maximum(own, problem.alignment)
    pool_names = list(map(_POOL, where))
    names = sorted(set(pool_names))
    if len(names) == 1:
        pool = np.zeros(n, dtype=np.int64)
    else:
        index = {name: k for k, name in enumerate(names)}
        pool = np.array([index[name] for name in pool_names], dtype=np.int64).reshape(n)
    known = np.array([name in pools for name in names] + [False], dtype=bool)[pool] if n else np.zeros(0, bool)
    capacity = np.array([_capacity(pools, name) for name in names] + [0], dtype=np.int64)[pool] if n else size
    end = offset + size
    suspect = ~known | (offset < 0) | (offset % align != 0) | (end > capacity)
    suspect |= np.array([c is not None for c in map(attrgetter("pool_candidates"), placed)], dtype=bool).reshape(n)
    for i in np.flatnonzero(suspect).tolist():
        b, at = placed[i], where[i]
        if at.pool not in pools:
            result.add(f"buffer {b.id!r} is in unknown pool {at.pool!r}")
            continue
        allowed = b.pool_candidates or every
        if at.pool not in allowed:
            result.add(f"buffer {b.id!r} is in pool {at.pool!r}, not one of its candidates {list(allowed)}")
        if at.offset < 0 or at.offset % align[i]:
            result.add(f"buffer {b.id!r} at offset {at.offset} breaks its alignment of {align[i]} bytes")
        limit = pools[at.pool].capacity
        if limit is not None and at.offset + b.size > limit:
            result.add(f"buffer {b.id!r} ends at {at.offset + b.size}, past pool {at.pool!r}'s capacity of {limit}")
    for k, name in enumerate(names):
        if name in pools:
            mine = end[(pool == k) & known]
            highest[name] = int(mine.max()) if mine.size else 0
    return highest, (pool, offset, size)


def _capacity(pools: dict[str, Pool], name: str) -> int:
    pool = pools.get(name)
    return _UNBOUNDED if pool is None or pool.capacity is None else pool.capacity


def _alias_group(problem: Problem) -> dict[str, str]:
    """Each buffer's alias root (itself when it aliases nothing); cycles are left to stop."""
    root: dict[str, str] = {}
    for b in problem.buffers:
        seen = {b.id}
        r = b
        while r.alias_of is not None and r.alias_of not in seen:
            seen.add(r.alias_of)
            r = problem.buffer(r.alias_of)
        root[b.id] = r.id
    return root


def _check_aliases(problem: Problem, plan: Plan, result: CheckResult) -> None:
    for b in problem.buffers:
        if b.alias_of is None or b.id not in plan.offsets or b.alias_of not in plan.offsets:
            continue
        mine, theirs = plan.offsets[b.id], plan.offsets[b.alias_of]
        if mine.pool != theirs.pool or mine.offset != theirs.offset + b.alias_offset:
            result.add(
                f"buffer {b.id!r} aliases {b.alias_of!r} at +{b.alias_offset} bytes but sits at "
                f"{mine.pool}:{mine.offset}, not {theirs.pool}:{theirs.offset + b.alias_offset}"
            )


# ---- condition 5, detected: a sweep over the steps ------------------------------------


def _any_overlap(
    problem: Problem, placed: list[Buffer], columns: tuple[np.ndarray, np.ndarray, np.ndarray], aliased: bool
) -> bool:
    """Whether two buffers of different alias groups overlap in bytes while both live.

    Each alias group is first cut into rectangles (steps x bytes) that do not overlap one
    another, so that no pair needs exempting. Then a sweep over the steps keeps the
    rectangles live at the current step ordered by (pool, start byte): the first overlap
    to appear is between a rectangle being added and its neighbour in that order, since
    the rectangles live before it were disjoint.
    """
    pool, offset, size = columns
    first = np.array(list(map(_FIRST, placed)), dtype=np.int64).reshape(len(placed))
    last = np.array(list(map(_LAST, placed)), dtype=np.int64).reshape(len(placed))
    sized = np.flatnonzero(size > 0)
    if aliased:
        rows = list(zip(*(c.tolist() for c in (pool, offset, offset + size, first, last)), strict=True))
        root = _alias_group(problem)
        groups: dict[str, list[int]] = {}
        for k in sized.tolist():
            groups.setdefault(root[placed[k].id], []).append(k)
        table: list[tuple[int, int, int, int, int]] = []
        for members in groups.values():
            table += _disjoint_pieces([rows[k] for k in members]) if len(members) > 1 else [rows[members[0]]]
        if len(table) < 2:
            return False
        data = np.array(table, dtype=np.int64)
        return _sweep_finds_overlap(data[:, 0], data[:, 1], data[:, 2], data[:, 3], data[:, 4])
    if len(sized) < 2:
        return False
    start = offset[sized]
    return _sweep_finds_overlap(pool[sized], start, start + size[sized], first[sized], last[sized])


def _disjoint_pieces(rows: list[tuple[int, int, int, int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Rectangles (pool, start, end, first, last) covering the same steps x bytes as `rows`
    (one alias group's buffers), no two of which overlap."""
    pieces = []
    for pool in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == pool]
        cuts = sorted({r[3] for r in mine} | {r[4] + 1 for r in mine})
        for a, b in zip(cuts, cuts[1:], strict=False):
            live = sorted((r[1], r[2]) for r in mine if r[3] <= a <= r[4])
            run_start, run_end = -1, -1
            for start, end in live + [(_UNBOUNDED, _UNBOUNDED)]:
                if start > run_end:
                    if run_end > run_start:
                        pieces.append((pool, run_start, run_end, a, b - 1))
                    run_start = start
                run_end = max(run_end, end)
    return pieces


def _sweep_finds_overlap(
    pool: np.ndarray, start: np.ndarray, end: np.ndarray, first: np.ndarray, last: np.ndarray
) -> bool:
    """The sweep of `_any_overlap` over rectangles that each have bytes."""
    n = len(start)
    order = np.lexsort((start, pool))  # stable: ties keep their index order
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    pools, starts, ends = pool[order].tolist(), start[order].tolist(), end[order].tolist()
    # Events in step order; at one step, rectangles ending before it leave first.
    times = np.concatenate((last + 1, first))
    adding = np.concatenate((np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)))
    events = np.lexsort((adding, times))
    events = events[: int(np.flatnonzero(adding[events])[-1]) + 1]  # nothing to see after the last arrival
    who = np.concatenate((rank, rank))[events].tolist()
    # The live set: ranks in buckets of 2**_SHIFT, each a sorted list, with the sorted list
    # of the buckets that are not empty.
    buckets: list[list[int]] = [[] for _ in range((n >> _SHIFT) + 1)]
    filled: list[int] = []
    for arrives, r in zip(adding[events].tolist(), who, strict=True):
        b = r >> _SHIFT
        bucket = buckets[b]
        at = bisect_left(bucket, r)
        if not arrives:
            del bucket[at]
            if not bucket:
                del filled[bisect_left(filled, b)]
            continue
        if at:
            before = bucket[at - 1]
        else:
            k = bisect_left(filled, b)
            before = buckets[filled[k - 1]][-1] if k else -1
        if before >= 0 and pools[before] == pools[r] and ends[before] > starts[r]:
            return True
        if at < len(bucket):
            after = bucket[at]
        else:
            k = bisect_right(filled, b)
            after = buckets[filled[k]][0] if k < len(filled) else -1
        if after >= 0 and pools[after] == pools[r] and starts[after] < ends[r]:
            return True
        if not bucket:
            insort(filled, b)
        bucket.insert(at, r)
    return False


# ---- condition 5, reported: every overlapping pair ------------------------------------


def _report_overlaps(problem: Problem, plan: Plan, placed: list[Buffer], result: CheckResult) -> None:
    """Sweep buffers by first step: those starting before one ends are its time-overlaps."""
    placed = [b for b in placed if b.size > 0]
    if not placed:
        return
    root = _alias_group(problem)
    placed.sort(key=lambda b: (b.first, b.id))
    first = np.array([b.first for b in placed], dtype=np.int64)
    last = np.array([b.last for b in placed], dtype=np.int64)
    start = np.array([plan.offsets[b.id].offset for b in placed], dtype=np.int64)
    end = start + np.array([b.size for b in placed], dtype=np.int64)
    pool_ids = {name: k for k, name in enumerate(sorted({plan.offsets[b.id].pool for b in placed}))}
    pool = np.array([pool_ids[plan.offsets[b.id].pool] for b in placed], dtype=np.int64)
    group_ids = {r: k for k, r in enumerate(sorted(set(root.values())))}
    group = np.array([group_ids[root[b.id]] for b in placed], dtype=np.int64)
    # Later buffers j > i with first[j] <= last[i] are live together with i at step first[j].
    stop = np.searchsorted(first, last, side="right")
    for i in range(len(placed)):
        j = np.arange(i + 1, stop[i])
        if j.size == 0:
            continue
        clash = j[(pool[j] == pool[i]) & (group[j] != group[i]) & (start[j] < end[i]) & (start[i] < end[j])]
        for k in clash[:MAX_REPORTED]:
            a, b = placed[i], placed[int(k)]
            lo, hi = max(start[i], start[k]), min(end[i], end[k])
            result.add(
                f"buffers {a.id!r} and {b.id!r} are both live at step {max(a.first, b.first)} "
                f"and overlap in bytes [{lo}, {hi}) of pool {plan.offsets[a.id].pool!r}"
            )
        result.total += max(0, clash.size - MAX_REPORTED)
