"""`pick_among`'s answer read from the few wide gaps of one union, in compiled code.

A long-lived block of a training trace meets the unions of everything placed during its
life: thousands of range ends at 10^5 buffers, ten times more at 10^6, and sorting them all
for every such block makes planning grow as n^2. Yet a free run that fits among all of them
lies inside a gap at least as wide as the block in each union, and the gaps of the
shortest union are few. So, in one compiled call:

1. Take the shortest union (the first of equal length). Counting each union's wide gaps
   to take the one with the fewest (as before) read every union whole for every query,
   which cost more than the extra candidates it saved cutting: at 10^6 buffers a long
   query reads about 40,000 range ends, mostly from memory.
2. Merge the loose ranges (flat, any order, overlaps allowed) into a union, sorted once.
3. Take its gaps at least `size` bytes wide, and the free run above it (first fit: a few at a time,
   lowest first), and cut them by the loose ranges, then by every other union (galloping to
   the first range reaching into each, then a walk over the ranges inside), dropping pieces
   narrower than the block. The pieces left are exactly the free runs of
   `planner.timeline.pick` at least `size` wide, whatever the order of the cuts; the order
   only sets the cost, which grows with the pieces each cut meets. The loose ranges (the
   short blocks live with the block) come first, and in queries past `LONGEST_FIRST` range
   ends the longest unions: there they are long-lived blocks packed with narrow gaps, which
   leave few pieces (on training_like(10^6), greedy_by_size's and best_fit's heaviest queries).
4. Apply `pick`'s rule to them: the lowest that fits (``align_up(low) + size <= high``),
   or with `best` the shortest (``high - low``), the lowest on ties; above everything (the
   highest range end, aligned up) when none fits.

Without numba (or with ``MEMPLAN_JIT=0``) `search` is None and the engine sorts in numpy.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from planner.jit import compiled, view

NEVER = 1 << 62  # the upper end of the free run above everything
LONGEST_FIRST = 80_000  # past this many range ends in the unions, the longest are cut by first


def _cut(
    lows: np.ndarray,
    highs: np.ndarray,
    n: int,
    flat: np.ndarray,
    size: int,
    out_lows: np.ndarray,
    out_highs: np.ndarray,
) -> int:
    """Cut the free runs ``[lows[:n], highs[:n])`` (by offset) by the union `flat`;
    write the pieces at least `size` wide to `out_lows`, `out_highs` by offset; their count."""
    m, a, b = 0, 0, len(flat)
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


def ordered(values: np.ndarray) -> np.ndarray:
    """`values` sorted, by a merge sort: the ranges gathered for a query come as sorted runs
    (unions, blocks placed in order), on which numba's quicksort degrades badly (on the
    auto-sharding trace Y_1 it made the compiled loop slower than the Python one)."""
    return values[np.argsort(values, kind="mergesort")]


def _merge(loose: np.ndarray) -> np.ndarray:
    """The union of loose ranges (flat, any order, overlaps allowed): sorted, disjoint.
    With starts and ends sorted apart, a range of the union ends at ``ends[i - 1]`` exactly
    when ``ends[i - 1] < starts[i]`` (as in `planner.timeline.pick`)."""
    count = len(loose) // 2
    merged = np.empty(2 * count, dtype=np.int64)
    if count == 0:
        return merged
    starts = ordered(loose[0::2])
    ends = ordered(loose[1::2])
    merged[0], m = starts[0], 1
    for i in range(1, count):
        if ends[i - 1] < starts[i]:
            merged[m] = ends[i - 1]
            merged[m + 1] = starts[i]
            m += 2
    merged[m] = ends[count - 1]
    return merged[: m + 1]


def gap_search(addresses: np.ndarray, lengths: np.ndarray, loose: np.ndarray, size: int, align: int, best: bool) -> int:
    """`pick` among the unions at `addresses` (int64 buffers of `lengths` values; at least
    one, each sorted, disjoint, not empty) and the `loose` ranges (flat, any order)."""
    k = len(addresses)
    base = int(np.argmin(lengths))  # step 1
    order = np.argsort(-lengths) if lengths.sum() > LONGEST_FIRST else np.arange(k)
    merged = _merge(loose)  # step 2
    room = (lengths.sum() + len(merged)) // 2 + 2  # cutting never leaves more pieces than ranges + 1
    lows, highs = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
    lows2, highs2 = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
    flat = view(addresses[base], lengths[base])
    chosen, least, top = -1, NEVER, 0
    # First fit wants the lowest: its candidates are cut a few at a time, lowest first (twice
    # as many each round); best fit compares them all, at once.
    batch = len(flat) if best else 16
    g = -1  # the next gap lies above range end flat[g] (below the first range when g < 0)
    while g < len(flat):
        n = 0
        while g < len(flat) and n < batch:
            low = flat[g] if g >= 0 else 0
            high = flat[g + 1] if g + 1 < len(flat) else NEVER
            g += 2
            if high - low >= size:
                lows[n], highs[n] = low, high
                n += 1
        batch *= 2
        if n and len(merged):  # step 3
            n = _cut(lows, highs, n, merged, size, lows2, highs2)
            lows, lows2 = lows2, lows
            highs, highs2 = highs2, highs
        for v in order:
            if v != base and n:
                n = _cut(lows, highs, n, view(addresses[v], lengths[v]), size, lows2, highs2)
                lows, lows2 = lows2, lows
                highs, highs2 = highs2, highs
        for p in range(n):  # step 4
            low, high = lows[p], highs[p]
            if high == NEVER:  # the free run above everything
                top = low
                continue
            at = (low + align - 1) // align * align
            if at + size <= high:
                if not best or high - low == size:  # nothing lower, or nothing shorter, can come
                    return at
                if high - low < least:
                    chosen, least = at, high - low
    if chosen >= 0:
        return chosen
    return (top + align - 1) // align * align


# Compiled when numba is there: the module's names are rebound so that `gap_search` calls the
# compiled helpers (numba resolves them when it compiles `gap_search`).
_cut_compiled = compiled(_cut)
if _cut_compiled is not None:
    _cut = _cut_compiled  # type: ignore[assignment]
    ordered = compiled(ordered) or ordered
    _merge = compiled(_merge) or _merge
search = compiled(gap_search)


def search_unions(unions: Sequence[Sequence[int]], loose: list[int], size: int, align: int, best: bool) -> int:
    """`planner.timeline.pick_among` by `search` (which must not be None): `unions` at least
    one. The unions' buffers are read where they are: none may change during the call."""
    assert search is not None
    kept = [union if type(union) is array else array("q", union) for union in unions]
    # (address, length) of each buffer, as two rows of int64.
    addresses, lengths = np.array([union.buffer_info() for union in kept], dtype=np.int64).T.copy()
    return int(search(addresses, lengths, np.array(loose, dtype=np.int64), size, align, best))
