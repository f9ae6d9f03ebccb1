"""Placing blocks in first-use order: a sweep over the schedule with one union of live bytes.

When blocks are placed in order of their first step (ONE's first fit and bump planners
walk the schedule that way), the placed blocks that meet the next one in time are exactly
those still live at its first step. Blocks live at one step never share a byte, so the
bytes they hold form one union from which a block's bytes can be taken out again when it
dies. The sweep:

1. before placing a block, takes out the bytes of every placed block whose last step is
   before the block's first step (a heap ordered by last step);
2. reads the gaps of the union of live bytes (lowest first) and picks one by the rule;
3. adds the block's bytes to the union and its last step to the heap.

Each block costs O(log n) plus the gaps it reads; the result is the same as the general
engine's (`planner.timeline`) for the same order and rule.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heappop, heappush

from planner.timeline import add

_NEVER = 1 << 62


def sweep(facts: list[tuple[int, int, int, int]], best: bool, limit: int) -> tuple[list[int], int]:
    """Offsets for blocks given in placing order as (first, last, size, align), with first
    steps never decreasing; stops after the block that takes the top past `limit`.
    Returns the offsets (of the blocks placed) and the top."""
    live: list[int] = []  # flat union [start0, end0, start1, end1, ...] of live bytes
    dying: list[tuple[int, int, int]] = []  # (last step, start, end) of live blocks
    offsets: list[int] = []
    top = 0
    for first, last, size, align in facts:
        if size == 0:
            offsets.append(0)
            continue
        while dying and dying[0][0] < first:
            _, start, end = heappop(dying)
            _take_out(live, start, end)
        at = _pick(live, size, align, best)
        end = at + size
        add(live, at, end)
        heappush(dying, (last, at, end))
        offsets.append(at)
        if end > top:
            top = end
            if top > limit:
                break
    return offsets, top


def _take_out(live: list[int], start: int, end: int) -> None:
    """Remove bytes ``[start, end)``, which lie inside one range of the union."""
    i = bisect_right(live, start) - 1
    low, high = live[i], live[i + 1]
    pieces: list[int] = []
    if low < start:
        pieces += (low, start)
    if end < high:
        pieces += (end, high)
    live[i : i + 2] = pieces


def _pick(live: list[int], size: int, align: int, best: bool) -> int:
    """`planner.timeline.pick` for one union: its gaps are already in order."""
    chosen, least = -1, _NEVER
    reach = 0
    for k in range(0, len(live), 2):
        start = live[k]
        if start > reach:
            at = reach if align == 1 else -(-reach // align) * align
            if at + size <= start:
                if not best:
                    return at
                if start - reach < least:
                    chosen, least = at, start - reach
        reach = live[k + 1]
    if chosen >= 0:
        return chosen
    return reach if align == 1 else -(-reach // align) * align
