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

The union is kept in chunks of up to `CHUNK` ranges, each with its widest gap, so that
first fit skips the chunks whose gaps are all too small: a deep training step leaves
thousands of holes below the top. Each block costs O(log n) plus the chunks it reads;
the result is the same as the general engine's (`planner.timeline`) for the same order.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from heapq import heappop, heappush
from itertools import compress, count
from operator import sub

import numpy as np

from planner.timeline import add

CHUNK = 64  # ranges per chunk of the live union (a chunk splits at twice as many)
FEW = 8  # up to this many chunks, first fit reads them all rather than their widest gaps
_NEVER = 1 << 62


class LiveBytes:
    """A union of disjoint byte ranges that do not touch, in chunks; each chunk is a flat
    sorted list ``[start0, end0, ...]`` and knows its widest gap (the one before its
    first range included, from the previous chunk's last end or from 0)."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.heads: list[int] = []  # first start of each chunk
        self.widest = np.zeros(16, dtype=np.int64)  # widest gap of each chunk
        self.measured = True  # `widest` is up to date (left to go stale while chunks are few)

    def add(self, start: int, end: int) -> None:
        """Add bytes ``[start, end)`` (start < end) that no range holds yet."""
        chunks, heads = self.chunks, self.heads
        if not chunks:
            chunks.append([start, end])
            heads.append(start)
            self._measure(0)
            return
        k = bisect_right(heads, start) - 1
        if k < 0:
            k = 0
        last = bisect_right(heads, end) - 1
        if last < 0:
            last = 0
        chunk = chunks[k]
        if last == k and self.measured and len(chunks) > FEW:
            i = bisect_right(chunk, start)  # even: it goes into the gap before chunk[i]
            if 0 < i < len(chunk) and chunk[i] - chunk[i - 1] < self.widest[k] and len(chunk) < 4 * CHUNK:
                # A gap inside the chunk, not its widest: the chunk's first start, last
                # end and widest gap stay as they are.
                add(chunk, start, end)
                return
        if last > k:  # touches the next chunk's first range: merge those chunks
            chunks[k : last + 1] = [[x for chunk in chunks[k : last + 1] for x in chunk]]
            del heads[k + 1 : last + 1]
            self._drop(k + 1, last + 1)
            chunk = chunks[k]
        add(chunk, start, end)
        heads[k] = chunk[0]
        if len(chunk) > 4 * CHUNK:
            half = len(chunk) // 4 * 2
            chunks[k + 1 : k + 1] = [chunk[half:]]
            heads.insert(k + 1, chunk[half])
            del chunk[half:]
            self.widest = np.insert(self.widest, k + 1, 0)  # one longer: room for the new chunk
            self._measure(k + 1)
        self._measure(k)
        if k + 1 < len(chunks):
            self._measure(k + 1)

    def take_out(self, start: int, end: int) -> None:
        """Remove bytes ``[start, end)``, which lie inside one range of the union."""
        k = bisect_right(self.heads, start) - 1
        chunk = self.chunks[k]
        i = bisect_right(chunk, start) - 1
        low, high = chunk[i], chunk[i + 1]
        if self.measured and len(self.chunks) > FEW and len(chunk) > 2:
            self._widen(k, i, start, end)
            return
        pieces: list[int] = []
        if low < start:
            pieces += (low, start)
        if end < high:
            pieces += (end, high)
        chunk[i : i + 2] = pieces
        if not chunk:
            del self.chunks[k], self.heads[k]
            self._drop(k, k + 1)
        else:
            self.heads[k] = chunk[0]
            self._measure(k)
        if k + (1 if chunk else 0) < len(self.chunks):
            self._measure(k + (1 if chunk else 0))

    def _widen(self, k: int, i: int, start: int, end: int) -> None:
        """`take_out` from range i of chunk k (which keeps a range) while the widest gaps
        are kept: the gap it leaves only grows, so the widest gap of the chunk that holds
        it (this one, or the next one when it is the gap before that chunk's first range)
        is the larger of the two."""
        chunks = self.chunks
        chunk = chunks[k]
        low, high = chunk[i], chunk[i + 1]
        below = start if low < start else chunk[i - 1] if i else chunks[k - 1][-1] if k else 0
        owner = k
        if end < high:
            above = end
        elif i + 2 < len(chunk):
            above = chunk[i + 2]
        elif k + 1 < len(chunks):
            above, owner = chunks[k + 1][0], k + 1
        else:
            above = -1  # the space above everything: no chunk's gap
        pieces: list[int] = []
        if low < start:
            pieces += (low, start)
        if end < high:
            pieces += (end, high)
        chunk[i : i + 2] = pieces
        self.heads[k] = chunk[0]
        if above - below > self.widest[owner]:
            self.widest[owner] = above - below

    def _drop(self, lo: int, hi: int) -> None:
        """Forget the widest gaps of chunks lo..hi-1, removed. `widest` keeps its length (it
        is a buffer of at least as many entries as chunks), so that a union emptied and
        refilled many times never runs short of it."""
        widest = self.widest
        widest[lo : len(widest) - (hi - lo)] = widest[hi:].copy()

    def _measure(self, k: int) -> None:
        if len(self.chunks) <= FEW:
            self.measured = False
            return
        chunk = self.chunks[k]
        gap = chunk[0] - self.chunks[k - 1][-1] if k else chunk[0]
        if len(chunk) > 2:
            inside = max(map(sub, chunk[2::2], chunk[1:-1:2]))
            if inside > gap:
                gap = inside
        if k >= len(self.widest):
            self.widest = np.concatenate((self.widest, np.zeros(len(self.widest), dtype=np.int64)))
        self.widest[k] = gap

    def pick(self, size: int, align: int, best: bool) -> int:
        """`planner.timeline.pick` for this union: its gaps are in order already."""
        chosen, least = -1, _NEVER
        chunks = self.chunks
        candidates: Iterable[int] = range(len(chunks))
        if len(chunks) > FEW:
            if not self.measured:
                self.measured = True
                for k in range(len(chunks)):
                    self._measure(k)
            found = np.flatnonzero(self.widest[: len(chunks)] >= size)
            # First fit mostly stops in the first chunk found: read the rest only then.
            candidates = found.tolist() if best else _lazily(found)
        for k in candidates:
            chunk = chunks[k]
            reach = chunks[k - 1][-1] if k else 0
            if not best:
                at = _first_in(chunk, reach, size, align)
                if at >= 0:
                    return at
                continue
            for j in range(0, len(chunk), 2):
                start = chunk[j]
                if start - reach >= size:
                    at = reach if align == 1 else -(-reach // align) * align
                    if at + size <= start:
                        if not best:
                            return at
                        if start - reach < least:
                            chosen, least = at, start - reach
                reach = chunk[j + 1]
        if chosen >= 0:
            return chosen
        top = chunks[-1][-1] if chunks else 0
        return top if align == 1 else -(-top // align) * align


def _first_in(chunk: list[int], reach: int, size: int, align: int) -> int:
    """The lowest offset where `size` bytes fit in a gap of `chunk` (the first one from
    `reach`, the end before it), -1 if none: the gaps too small are skipped in C."""
    at = reach if align == 1 else -(-reach // align) * align
    if at + size <= chunk[0]:
        return at
    lows, highs = chunk[1:-1:2], chunk[2::2]
    for j in compress(count(), map(size.__le__, map(sub, highs, lows))):
        at = lows[j] if align == 1 else -(-lows[j] // align) * align
        if at + size <= highs[j]:
            return at
    return -1


def _lazily(found: np.ndarray) -> Iterator[int]:
    yield from found[:4].tolist()
    yield from found[4:].tolist()


def sweep(facts: list[tuple[int, int, int, int]], best: bool, limit: int) -> tuple[list[int], int]:
    """Offsets for blocks given in placing order as (first, last, size, align), with first
    steps never decreasing; stops after the block that takes the top past `limit`.
    Returns the offsets (of the blocks placed) and the top."""
    live = LiveBytes()
    dying: list[tuple[int, int, int]] = []  # (last step, start, end) of live blocks
    offsets: list[int] = []
    top = 0
    for first, last, size, align in facts:
        if size == 0:
            offsets.append(0)
            continue
        while dying and dying[0][0] < first:
            _, start, end = heappop(dying)
            live.take_out(start, end)
        at = live.pick(size, align, best)
        end = at + size
        live.add(at, end)
        heappush(dying, (last, at, end))
        offsets.append(at)
        if end > top:
            top = end
            if top > limit:
                break
    return offsets, top
