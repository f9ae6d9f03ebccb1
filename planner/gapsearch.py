"""`pick_among`'s answer read from the few wide gaps of one union, in compiled code.

A long-lived block of a training trace meets the unions of everything placed during its
life: thousands of range ends at 10^5 buffers, ten times more at 10^6, and sorting them all
for every such block makes planning grow as n^2. Yet a free run that fits among all of them
lies inside a gap at least as wide as the block in each union, and one of the unions
usually has few such gaps. So, in one compiled call:

1. Per union, count its gaps at least `size` bytes wide (the free run below its first
   range included, the one above its last not); take the union with the fewest.
2. Merge the loose ranges (flat, any order, overlaps allowed) into a union, sorted once.
3. Take the wide gaps of that union, and the free run above it, and cut them by every other
   union (galloping to the first range reaching into each, then a walk over the ranges
   inside) and by the loose ranges, dropping pieces narrower than the block. The
   pieces left are exactly the free runs of `planner.timeline.pick` at least `size` wide.
4. Apply `pick`'s rule to them: the lowest that fits (``align_up(low) + size <= high``),
   or with `best` the shortest (``high - low``), the lowest on ties; above everything (the
   highest range end, aligned up) when none fits.

Without numba (or with ``MEMPLAN_JIT=0``) `search` is None and the engine sorts in numpy.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from planner._compiled import compiled

NEVER = 1 << 62  # the upper end of the free run above everything


def _cut(
    lows: np.ndarray,
    highs: np.ndarray,
    n: int,
    flat: np.ndarray,
    a: int,
    b: int,
    size: int,
    out_lows: np.ndarray,
    out_highs: np.ndarray,
) -> int:
    """Cut the free runs ``[lows[:n], highs[:n])`` (by offset) by the union ``flat[a:b]``;
    write the pieces at least `size` wide to `out_lows`, `out_highs` by offset; their count."""
    m = 0
    i = a  # the runs come by offset: the search for the next one starts where this one ended
    for p in range(n):
        low, high = lows[p], highs[p]
        # The first range end above `low`: galloping from i, then bisecting.
        if i < b and flat[i] <= low:
            step = 1
            while i + step < b and flat[i + step] <= low:
                i += step
                step *= 2
            hi = min(i + step, b)  # flat[i] <= low < flat[hi] (or hi == b)
            while hi - i > 1:
                mid = (i + hi) >> 1
                if flat[mid] <= low:
                    i = mid
                else:
                    hi = mid
            i = hi
        if (i - a) & 1:  # `low` lies in a range: free from its end
            low = flat[i]
            i += 1
        while i < b and flat[i] < high:  # flat[i] starts a range inside the run
            if flat[i] - low >= size:
                out_lows[m] = low
                out_highs[m] = flat[i]
                m += 1
            low = flat[i + 1]
            i += 2
        if high - low >= size:
            out_lows[m] = low
            out_highs[m] = high
            m += 1
        if i > a and (i - a) & 1 == 0:
            i -= 2  # the next run may start inside the range this one ended in
    return m


def _merge(loose: np.ndarray) -> np.ndarray:
    """The union of loose ranges (flat, any order, overlaps allowed): sorted, disjoint."""
    count = len(loose) // 2
    merged = np.empty(2 * count, dtype=np.int64)
    if count == 0:
        return merged
    starts = loose[0::2]
    ends = loose[1::2]
    order = np.argsort(starts)
    m = 0
    start, end = starts[order[0]], ends[order[0]]
    for k in range(1, count):
        s, e = starts[order[k]], ends[order[k]]
        if s > end:
            merged[m] = start
            merged[m + 1] = end
            m += 2
            start, end = s, e
        elif e > end:
            end = e
    merged[m] = start
    merged[m + 1] = end
    return merged[: m + 2]


def gap_search(flat: np.ndarray, bounds: np.ndarray, loose: np.ndarray, size: int, align: int, best: bool) -> int:
    """`pick` among the unions ``flat[bounds[u]:bounds[u + 1]]`` (at least one, each sorted,
    disjoint, not empty) and the `loose` ranges (flat, any order)."""
    k = len(bounds) - 1
    sparsest, fewest = 0, NEVER
    for u in range(k):  # step 1
        a, b = bounds[u], bounds[u + 1]
        c = 1 if flat[a] >= size else 0
        i = a + 1
        while i + 1 < b and c < fewest:
            if flat[i + 1] - flat[i] >= size:
                c += 1
            i += 2
        if c < fewest:
            sparsest, fewest = u, c
    merged = _merge(loose)  # step 2
    room = (len(flat) + len(merged)) // 2 + 2  # cutting never leaves more pieces than ranges + 1
    lows, highs = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
    lows2, highs2 = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
    a, b = bounds[sparsest], bounds[sparsest + 1]
    n = 0
    if flat[a] >= size:
        lows[0], highs[0], n = 0, flat[a], 1
    for g in range(a + 1, b - 1, 2):
        if flat[g + 1] - flat[g] >= size:
            lows[n], highs[n] = flat[g], flat[g + 1]
            n += 1
    lows[n], highs[n] = flat[b - 1], NEVER
    n += 1
    for v in range(k):  # step 3, all candidates together
        if v != sparsest:
            n = _cut(lows, highs, n, flat, bounds[v], bounds[v + 1], size, lows2, highs2)
            lows, lows2 = lows2, lows
            highs, highs2 = highs2, highs
    if len(merged):
        n = _cut(lows, highs, n, merged, 0, len(merged), size, lows2, highs2)
        lows, highs = lows2, highs2
    chosen, least = -1, NEVER
    for p in range(n - 1):  # step 4; the last piece is the free run above everything
        low, high = lows[p], highs[p]
        at = (low + align - 1) // align * align
        if at + size <= high:
            if not best or high - low == size:  # nothing lower, or nothing shorter, can come
                return at
            if high - low < least:
                chosen, least = at, high - low
    if chosen >= 0:
        return chosen
    return (lows[n - 1] + align - 1) // align * align


# Compiled when numba is there: the module's names are rebound so that `gap_search` calls the
# compiled helpers (numba resolves them when it compiles `_search`).
_cut_compiled = compiled(_cut)
if _cut_compiled is not None:
    _cut = _cut_compiled  # type: ignore[assignment]
    _merge = compiled(_merge) or _merge
search = compiled(gap_search)


def search_unions(unions: Sequence[Sequence[int]], loose: list[int], size: int, align: int, best: bool) -> int:
    """`planner.timeline.pick_among` by `search` (which must not be None): `unions` at least one."""
    assert search is not None
    flat = array("q", loose)  # the loose ranges first, then the unions, copied buffer to buffer
    bounds = array("q", [len(flat)])
    for union in unions:
        flat += union if type(union) is array else array("q", union)
        bounds.append(len(flat))
    taken = np.frombuffer(flat, dtype=np.int64)
    return int(search(taken, np.frombuffer(bounds, dtype=np.int64), taken[: bounds[0]], size, align, best))
