"""`planner.timeline`'s placing loop in compiled code, for a run that starts from nothing.

The engine's index (`planner.timeline`: ranges listed at points, own and sub unions over a
segment tree of the points) is kept here in flat int64 tables instead of Python lists and
arrays, so that a whole run of placements (`Occupancy.place_run` from an empty pool) is one
compiled call: at 10^6 buffers the Python upkeep of the unions cost as much as the gap
searches themselves. The steps and the answers are `planner.timeline`'s, one for one:

1. Every slot (a node's own or sub union, a point's listed or starting ranges) is a stretch
   of one growing store; a table per kind of slot holds each slot's start, length and room
   (`_START`, `_LENGTH`, `_CAP` rows). A slot that outgrows its stretch moves to the store's
   end with twice the room; the stretch it leaves is dropped.
2. A block's query gathers the same unions (the non-empty slots) and loose ranges as
   `Occupancy.parts`; no union: `pick` over the loose ranges (sorted starts and ends),
   else the gap search of `planner.gapsearch` over the unions in the store.
3. A placed block goes into the same slots as `Occupancy.insert` (with the same early
   stop up a path of sub unions), and a long block's answered query drops the sub unions
   nobody else reads, as `Occupancy.answered` does.

Same offsets as the Python loop, which remains the route without numba and for small runs
(tests compare the two on every engine case). Used by `planner.placement.Placer` when
nothing is placed yet. numba caches this loop with the gap search compiled into it: after a
change to `planner.gapsearch` alone, clear the cache (``planner/__pycache__/timeline_jit*``)
or this module's cached code keeps the old search.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.gapsearch import NEVER, gap_search, ordered, search
from planner.jit import compiled, move
from planner.timeline import FEW, LONG, Timeline

_OWN, _SUB, _LISTED, _STARTING = 0, 1, 2, 3  # the tables of slots
_START, _LENGTH, _CAP = 0, 1, 2  # the rows of a table: where each slot's stretch starts, its values, its room


def _reserve(store: np.ndarray, meta: np.ndarray, table: np.ndarray, slot: int, extra: int) -> np.ndarray:
    """Room for `extra` more values in `slot` of `table` (step 1); the store, grown when full."""
    need = table[_LENGTH, slot] + extra
    if need <= table[_CAP, slot]:
        return store
    room = max(4, 2 * need)
    top = meta[0]
    if top + room > len(store):
        bigger = np.empty(max(2 * len(store), top + room), dtype=np.int64)
        bigger[:top] = store[:top]
        store = bigger
    move(store, top, table[_START, slot], table[_LENGTH, slot])
    table[_START, slot], table[_CAP, slot] = top, room
    meta[0] = top + room
    return store


def _append(store: np.ndarray, meta: np.ndarray, table: np.ndarray, slot: int, low: int, high: int) -> np.ndarray:
    """Add a range to a slot's list (unsorted)."""
    store = _reserve(store, meta, table, slot, 2)
    at = table[_START, slot] + table[_LENGTH, slot]
    store[at], store[at + 1] = low, high
    table[_LENGTH, slot] += 2
    return store


def _bisect(store: np.ndarray, first: int, count: int, value: int, right: bool) -> int:
    """`bisect_left` (or `bisect_right`) of `value` in the slot's `count` values at `first`."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) >> 1
        v = store[first + mid]
        if v < value or (right and v == value):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _add(
    store: np.ndarray, meta: np.ndarray, table: np.ndarray, slot: int, low: int, high: int
) -> tuple[np.ndarray, bool]:
    """`planner.timeline._add_one`: bytes ``[low, high)`` into a slot's union, merging what
    they meet or touch; True when they lay inside a range already, touching neither end."""
    first, count = table[_START, slot], table[_LENGTH, slot]
    i = _bisect(store, first, count, low, False)
    j = _bisect(store, first, count, high, True)
    if i == j:
        if i & 1:
            return store, True
        store = _reserve(store, meta, table, slot, 2)
        first = table[_START, slot]
        move(store, first + i + 2, first + i, count - i)
        store[first + i], store[first + i + 1] = low, high
        table[_LENGTH, slot] = count + 2
        return store, False
    if i & 1:
        i -= 1
        low = store[first + i]
    if j & 1:
        high = store[first + j]
        j += 1
    if j > i + 2:
        move(store, first + i + 2, first + j, count - j)
        table[_LENGTH, slot] = count - (j - i - 2)
    store[first + i], store[first + i + 1] = low, high
    return store, False


def _gather(store: np.ndarray, table: np.ndarray, slot: int, loose: np.ndarray, m: int) -> tuple[np.ndarray, int]:
    """Copy a slot's values after the `m` in `loose` (grown when full); the new count."""
    c = table[_LENGTH, slot]
    if c:
        while m + c > len(loose):
            loose = np.concatenate((loose, loose))
        first = table[_START, slot]
        loose[m : m + c] = store[first : first + c]
    return loose, m + c


def _take(
    store: np.ndarray,
    table: np.ndarray,
    slot: int,
    loose: np.ndarray,
    m: int,
    union_at: np.ndarray,
    union_len: np.ndarray,
    k: int,
) -> tuple[np.ndarray, int, int]:
    """A slot's union for a query: its ranges into `loose` while short (as the Python
    engine's unions are lists up to `LONG`: a cut by a tiny union costs the gap search more
    than a few more loose ranges), else an entry of the union lists (room for it made)."""
    c = table[_LENGTH, slot]
    if c > LONG:
        union_at[k], union_len[k] = table[_START, slot], c
        return loose, m, k + 1
    loose, m = _gather(store, table, slot, loose, m)
    return loose, m, k


def _room_for_one(union_at: np.ndarray, union_len: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The two union lists with room for an entry at `k`."""
    if k < len(union_at):
        return union_at, union_len
    return np.concatenate((union_at, union_at)), np.concatenate((union_len, union_len))


def _canonical(lo: int, hi: int, leaves: int, nodes: np.ndarray) -> int:
    """`Timeline.canonical` of ``[lo, hi]`` into `nodes`; their count."""
    left, right = 0, len(nodes)
    a, b = lo + leaves, hi + leaves + 1
    while a < b:
        if a & 1:
            nodes[left] = a
            left += 1
            a += 1
        if b & 1:
            b -= 1
            right -= 1
            nodes[right] = b
        a >>= 1
        b >>= 1
    count = left + len(nodes) - right
    for k in range(right, len(nodes)):
        nodes[left] = nodes[k]
        left += 1
    return count


def _pick(taken: np.ndarray, size: int, align: int, best: bool) -> int:
    """`planner.timeline.pick` over flat ranges in any order."""
    if len(taken) == 0:
        return 0
    starts = ordered(taken[0::2])
    ends = ordered(taken[1::2])
    chosen, least = -1, NEVER
    if size <= starts[0]:
        if not best:
            return 0
        chosen, least = 0, starts[0]
    for k in range(len(starts) - 1):
        end, begin = ends[k], starts[k + 1]
        if end < begin:
            at = (end + align - 1) // align * align
            if at + size <= begin:
                if not best:
                    return at
                if begin - end < least:
                    chosen, least = at, begin - end
    if chosen >= 0:
        return chosen
    return (ends[-1] + align - 1) // align * align


def place_run(
    blocks: np.ndarray,
    sizes: np.ndarray,
    aligns: np.ndarray,
    lo_of: np.ndarray,
    hi_of: np.ndarray,
    leaves: int,
    short: int,
    sub_limit: int,
    wants: np.ndarray,
    own_up: np.ndarray,
    sub_up: np.ndarray,
    open_queries: int,
    best: bool,
    limit: int,
) -> tuple[np.ndarray, int]:
    """Place `blocks` in order (`sizes`, `aligns` in that order; `lo_of`, `hi_of` by block)
    into an empty pool, as `Occupancy.place_run`; `wants` is changed. Stops after the
    block that takes the top past `limit`. Returns the offsets of the blocks placed and the top."""
    n = len(blocks)
    slots = 2 * leaves
    tables = np.zeros((4, 3, slots), dtype=np.int64)  # by table: start, length and cap of each slot
    store = np.empty(8 * n + 1024, dtype=np.int64)
    meta = np.zeros(1, dtype=np.int64)
    loose = np.empty(1024, dtype=np.int64)
    nodes = np.empty(128, dtype=np.int64)
    union_at = np.empty(256, dtype=np.int64)
    union_len = np.empty(256, dtype=np.int64)
    offsets = np.zeros(n, dtype=np.int64)
    top, placed = 0, 0
    for q in range(n):
        i, size, align = blocks[q], sizes[q], aligns[q]
        placed = q + 1
        if size == 0:
            continue
        lo, hi = lo_of[i], hi_of[i]
        is_long = hi - lo >= short
        m, k, count = 0, 0, 0  # loose values, unions, canonical nodes
        x = y = 0  # the nodes whose own unions, and their ancestors', the query reads
        # ---- the query (step 2): loose ranges into `loose`, unions into union_at/len
        if is_long and lo == 0 and hi == leaves - 1 and sub_limit > 1:
            count = _canonical(lo, hi, leaves, nodes)
            # Live throughout: every placed block is in the root's sub union.
            loose, m, k = _take(store, tables[_SUB], 1, loose, m, union_at, union_len, k)
        elif is_long:
            count = _canonical(lo, hi, leaves, nodes)
            loose, m = _gather(store, tables[_LISTED], lo, loose, m)
            loose, m = _gather(store, tables[_LISTED], hi, loose, m)
            for e in range(count):
                node = nodes[e]
                if node < sub_limit:
                    loose, m, k = _take(store, tables[_SUB], node, loose, m, union_at, union_len, k)
                    continue
                width = 1
                while node < leaves:
                    for below in range(node, node + width):
                        loose, m = _gather(store, tables[_OWN], below, loose, m)
                    node <<= 1
                    width <<= 1
                for point in range(node - leaves, node - leaves + width):
                    loose, m = _gather(store, tables[_LISTED], point, loose, m)
                    loose, m = _gather(store, tables[_OWN], point + leaves, loose, m)
            x, y = own_up[nodes[0]], own_up[nodes[count - 1]]
        else:
            loose, m = _gather(store, tables[_LISTED], lo, loose, m)
            for point in range(lo + 1, hi + 1):
                loose, m = _gather(store, tables[_STARTING], point, loose, m)
            x, y = lo + leaves, hi + leaves
        while x != y:  # the own unions on the paths up from x and y, each node once
            if x > y:
                node, x = x, own_up[x]
            else:
                node, y = y, own_up[y]
            union_at, union_len = _room_for_one(union_at, union_len, k)
            loose, m, k = _take(store, tables[_OWN], node, loose, m, union_at, union_len, k)
        while x:
            union_at, union_len = _room_for_one(union_at, union_len, k)
            loose, m, k = _take(store, tables[_OWN], x, loose, m, union_at, union_len, k)
            x = own_up[x]
        ends = m
        for e in range(k):
            ends += union_len[e]
        if k == 0 or ends <= FEW:  # few ranges: sorting them costs less than the gap search's set-up
            for e in range(k):
                c = union_len[e]
                loose[m : m + c] = store[union_at[e] : union_at[e] + c]
                m += c
            at = _pick(loose[:m], size, align, best)
        else:
            base = store.ctypes.data
            at = _gap_search(base + 8 * union_at[:k], union_len[:k].copy(), loose[:m].copy(), size, align, best)
        offsets[q] = at
        end = at + size
        # ---- the updates (step 3)
        if is_long:
            for e in range(count):  # answered: nodes nobody else reads drop their sub union
                node = nodes[e]
                if node < sub_limit:
                    wants[node] -= 1
                    if not wants[node]:
                        tables[_SUB, _LENGTH, node] = 0
            open_queries -= 1
            for e in range(count):
                store, _ = _add(store, meta, tables[_OWN], nodes[e], at, end)
            if open_queries:
                for e in range(count):
                    node = nodes[e]
                    if node < sub_limit and wants[node]:
                        store, _ = _add(store, meta, tables[_SUB], node, at, end)
                store = _subs(
                    store, meta, tables[_SUB], wants, sub_up, sub_up[nodes[0]], sub_up[nodes[count - 1]], at, end
                )
        else:
            for point in range(lo, hi + 1):
                store = _append(store, meta, tables[_LISTED], point, at, end)
            store = _append(store, meta, tables[_STARTING], lo, at, end)
            if open_queries:
                store = _subs(
                    store, meta, tables[_SUB], wants, sub_up, sub_up[lo + leaves], sub_up[hi + leaves], at, end
                )
        if end > top:
            top = end
            if top > limit:
                break
    return offsets[:placed], top


def _subs(
    store: np.ndarray,
    meta: np.ndarray,
    table: np.ndarray,
    wants: np.ndarray,
    up: np.ndarray,
    x: int,
    y: int,
    low: int,
    high: int,
) -> np.ndarray:
    """`Occupancy._subs`: the bytes into the sub unions still read on the paths up from x
    and y, stopping up a path once they lie inside a range there."""
    inside_x = inside_y = False
    while x != y:
        if x > y:
            node, x = x, up[x]
            if wants[node] and not inside_x:
                store, inside_x = _add(store, meta, table, node, low, high)
        else:
            node, y = y, up[y]
            if wants[node] and not inside_y:
                store, inside_y = _add(store, meta, table, node, low, high)
    if inside_x or inside_y:
        return store
    while x:
        if wants[x]:
            store, inside = _add(store, meta, table, x, low, high)
            if inside:
                return store
        x = up[x]
    return store


_gap_search = gap_search
_run: Callable[..., tuple[np.ndarray, int]] | None = None
if search is not None:
    _gap_search = search
    _reserve = compiled(_reserve)  # type: ignore[assignment]
    _append = compiled(_append)  # type: ignore[assignment]
    _bisect = compiled(_bisect)  # type: ignore[assignment]
    _add = compiled(_add)  # type: ignore[assignment]
    _gather = compiled(_gather)  # type: ignore[assignment]
    _take = compiled(_take)  # type: ignore[assignment]
    _room_for_one = compiled(_room_for_one)  # type: ignore[assignment]
    _canonical = compiled(_canonical)  # type: ignore[assignment]
    _pick = compiled(_pick)  # type: ignore[assignment]
    _subs = compiled(_subs)  # type: ignore[assignment]
    _run = compiled(place_run)
USE = _run is not None  # the compiled loop is taken when it can be (tests turn it off to compare)
# Smaller runs keep the Python loop: it places them in well under a second, and a process
# that finds no cached machine code spends about ten seconds compiling this loop.
FROM_BLOCKS = 5_000


def run(
    timeline: Timeline, order: np.ndarray, sizes: np.ndarray, aligns: np.ndarray, best: bool, limit: int
) -> tuple[list[int], int] | None:
    """`Occupancy.place_run` of the blocks in `order` into an empty pool, compiled: the
    offsets of the blocks placed and the top; None without compiled loops, or for fewer
    than `FROM_BLOCKS` blocks."""
    if _run is None or not USE or len(order) < FROM_BLOCKS:
        return None
    offsets, top = _run(
        order.astype(np.int64),
        sizes.astype(np.int64),
        aligns.astype(np.int64),
        np.frombuffer(timeline.lo, dtype=np.int64),
        np.frombuffer(timeline.hi, dtype=np.int64),
        timeline.leaves,
        timeline.short,
        timeline.sub_limit,
        timeline.wants.copy(),
        np.frombuffer(timeline.own_up, dtype=np.int32),
        np.frombuffer(timeline.sub_up, dtype=np.int32),
        timeline.long_queries,
        best,
        limit,
    )
    return offsets.tolist(), int(top)
