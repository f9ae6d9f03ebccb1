"""Which bytes are taken during a span of steps: the placement engine's index.

Blocks are placed one at a time in any order; each needs the free gaps among the bytes of
the placed blocks live at a common step with it. Enumerating those blocks costs as many
steps as there are (hundreds of thousands in a training trace, where weights and saved
activations live across most of the schedule), so long-lived blocks are kept as *unions*
of byte ranges instead, which stay short however many blocks they cover.

1. Time: the distinct first steps are the points. Two live ranges share a step exactly
   when their point ranges ``[lo, hi]`` intersect, so nothing is lost.
2. A short block (at most `SHORT` points) is listed, as its byte range, at every point it
   covers and apart at the point where it starts: the placed short blocks live together
   with a short query ``[lo, hi]`` are those listed at ``lo`` and those starting after
   ``lo`` up to ``hi`` (each met once).
3. A long block is kept in a segment tree over the points: each of its O(log n) canonical
   nodes (maximal nodes inside its range) adds its bytes to the node's ``own`` union.
   Long blocks containing point ``t`` are those in the own unions on the path from leaf
   ``t`` to the root.
4. Nodes that a long query reads (its canonical nodes, at least `SUB_LEVEL` levels up)
   keep ``sub``, the union of every block, short or long, with a canonical node in their
   subtree; once all the long queries through a node are answered it drops it.
5. A query ``[lo, hi]`` meets the blocks containing ``lo`` or ``hi`` (the lists at those
   points and the own unions on their paths) and the blocks strictly inside: for a short
   query the lists at its points, for a long one the sub unions of its canonical nodes
   (below `SUB_LEVEL`, the lists and own unions of their small subtrees).

A union is flat and sorted, ``[start0, end0, start1, end1, ...]``, disjoint ranges that do
not touch (a list, an ``array("q")`` once `LONG`); the lists at points are flat too, unsorted, one range per block.
Gaps are read off sorted starts and sorted ends (`pick`), so repeated or overlapping ranges
cost nothing extra to merge. A query meeting many range ends (a long-lived block of a
training trace meets thousands) hands the unions' buffers to numpy as they are
(`pick_among`): no Python int is made for them.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

import numpy as np

from planner.gapsearch import search, search_unions
from planner.treepaths import canonical_nodes, gather_path, gather_points, nearest_marked_ancestor

SHORT = 32  # blocks covering at most this many points are listed at each of them
SUB_LEVEL = 2  # nodes this many levels above the leaves (or higher) keep subtree unions
_NEVER = 1 << 62  # larger than any gap
MANY = 1024  # `pick` hands queries meeting more than this many range ends to numpy
FEW = 192  # `pick_among` hands queries meeting more than this many to the compiled search
LONG = 64  # a union growing past this many range ends becomes an array("q")

Union = list[int] | array  # a union: a list while short, an array("q") once long


def add(flat: list[int] | array, start: int, end: int) -> None:
    """Add bytes ``[start, end)`` (start < end) to a union (a list, or an ``array("q")``
    as the engine keeps them), merging what it meets or touches."""
    i = bisect_left(flat, start)
    j = bisect_right(flat, end)
    if i & 1:
        i -= 1
        start = flat[i]
    if j & 1:
        end = flat[j]
        j += 1
    if i == j:
        flat.insert(i, end)
        flat.insert(i, start)
        return
    if j > i + 2:
        del flat[i + 2 : j]
    flat[i] = start
    flat[i + 1] = end


def pick(taken: list[int], size: int, align: int, best: bool) -> int:
    """The offset for `size` bytes (> 0, a multiple of `align`) among the gaps left by the
    byte ranges in `taken` (flat, in any order, overlaps allowed): the lowest gap that
    fits, or with `best` the smallest (ties: the lowest); above everything when none fits.

    With starts and ends sorted apart, ``[ends[i-1], starts[i])`` is a gap exactly when
    it is not empty: the first i ranges have all ended there and no other has begun.
    """
    if not taken:
        return 0
    if len(taken) > MANY:
        return _pick_many(np.fromiter(taken, dtype=np.int64, count=len(taken)), size, align, best)
    starts = taken[0::2]
    starts.sort()
    ends = taken[1::2]
    ends.sort()
    chosen, least = -1, _NEVER
    if size <= starts[0]:
        if not best:
            return 0
        chosen, least = 0, starts[0]
    for end, start in zip(ends, starts[1:], strict=False):  # ends[-1] is the top
        if end < start:
            at = end if align == 1 else -(-end // align) * align
            if at + size <= start:
                if not best:
                    return at
                if start - end < least:
                    chosen, least = at, start - end
    if chosen >= 0:
        return chosen
    end = ends[-1]
    return end if align == 1 else -(-end // align) * align


def _pick_many(taken: np.ndarray, size: int, align: int, best: bool) -> int:
    """`pick` in numpy, for queries that meet many ranges."""
    # The unions read are sorted runs already, which a stable sort (timsort) merges fast.
    starts, ends = np.sort(taken[0::2], kind="stable"), np.sort(taken[1::2], kind="stable")
    low = np.concatenate(([0], ends[:-1]))  # gap i is [low[i], starts[i]) when not empty
    at = low if align == 1 else -(-low // align) * align
    fits = (low < starts) & (at + size <= starts)
    if fits.any():
        k = int(np.argmin(np.where(fits, starts - low, _NEVER))) if best else int(fits.argmax())
        return int(at[k])
    top = int(ends[-1])
    return top if align == 1 else -(-top // align) * align


def pick_among(unions: list[Union], loose: list[int], size: int, align: int, best: bool) -> int:
    """`pick` among the ranges of `unions` (each sorted, disjoint, not touching, not empty) and of `loose` (flat, any order; it may be extended)."""
    if not unions:
        return pick(loose, size, align, best)
    ends = len(loose) + sum(map(len, unions))
    if search is not None and ends > FEW:  # compiled: cut the few wide gaps of one union by the others
        return search_unions(unions, loose, size, align, best)
    if ends <= MANY:
        for union in unions:
            loose += union
        return pick(loose, size, align, best)
    taken = array("q", loose)
    for union in unions:
        taken.extend(union)  # from an array, a copy of its buffer
    return _pick_many(np.frombuffer(taken, dtype=np.int64), size, align, best)


class Timeline:
    """The static part: points, each block's point range, and the tree's shape."""

    def __init__(self, first: np.ndarray, last: np.ndarray, asks: np.ndarray) -> None:
        """`asks` marks the blocks that will query (those with bytes)."""
        points = np.sort(first)
        points = points[np.concatenate((points[:1] == points[:1], points[1:] != points[:-1]))]
        lo = np.searchsorted(points, first).astype(np.int64)
        hi = (np.searchsorted(points, last, side="right") - 1).astype(np.int64)
        leaves = 1 << max(0, (len(points) - 1).bit_length())
        self.short = SHORT  # read at construction, so that tests may lower it
        # A long block reaching the last point reaches the padding leaves too (nothing is
        # there): fewer canonical nodes, and one living throughout has the root alone.
        hi[(hi == len(points) - 1) & (hi - lo >= self.short)] = leaves - 1
        self.points = len(points)
        self.leaves = leaves
        self.lo = array("q", lo.tobytes())
        self.hi = array("q", hi.tobytes())
        # Nodes below this index are SUB_LEVEL or more levels above the leaves.
        self.sub_limit = leaves >> (SUB_LEVEL - 1) if SUB_LEVEL else 2 * leaves
        long = hi - lo >= self.short
        has_own = np.zeros(2 * leaves, dtype=bool)
        has_own[canonical_nodes(lo[long], hi[long], leaves)] = True
        asking = canonical_nodes(lo[long & asks], hi[long & asks], leaves)
        asking = asking[asking < self.sub_limit]
        # How many long queries will read each node's sub union.
        self.wants = np.bincount(asking, minlength=2 * leaves).astype(np.int32)
        self.long_queries = int((long & asks).sum())
        # The nearest strict ancestor that can hold an own union, and one that may keep a
        # sub union: paths jump between them instead of walking every level.
        self.own_up = array("i", nearest_marked_ancestor(has_own, leaves).tobytes())
        self.sub_up = array("i", nearest_marked_ancestor(self.wants > 0, leaves).tobytes())

    def canonical(self, block: int) -> list[int]:
        """The canonical nodes of a block: first the one holding its left end, last the one
        holding its right end."""
        left: list[int] = []
        right: list[int] = []
        lo = self.lo[block] + self.leaves
        hi = self.hi[block] + self.leaves + 1
        while lo < hi:
            if lo & 1:
                left.append(lo)
                lo += 1
            if hi & 1:
                hi -= 1
                right.append(hi)
            lo >>= 1
            hi >>= 1
        right.reverse()
        return left + right


class Occupancy:
    """The dynamic part, one per pool: the byte ranges of the placed blocks."""

    def __init__(self, timeline: Timeline, wants: array) -> None:
        self.timeline = timeline
        # Long unions as array("q"): a query meeting many hands their buffers to numpy.
        self.own: list[Union | None] = [None] * (2 * timeline.leaves)
        self.sub: list[Union | None] = [None] * (2 * timeline.leaves)
        self.listed: list[list[int] | None] = [None] * timeline.leaves
        self.starting: list[list[int] | None] = [None] * timeline.leaves
        self.wants = wants  # shared by the pools: long queries still to come through each node
        self.open = 0  # the pools' long queries still to come (kept by the placer)

    def taken(self, block: int) -> list[int]:
        """The byte ranges taken at some step of `block`'s live range, flat, in any order."""
        unions, found = self.parts(block)
        for union in unions:
            found += union
        return found

    def parts(self, block: int, nodes: list[int] | None = None) -> tuple[list[Union], list[int]]:
        """The bytes `taken` as the unions that hold them (none empty) and the ranges of
        short blocks (flat, in any order)."""
        t = self.timeline
        listed = self.listed
        lo, hi = t.lo[block], t.hi[block]
        unions: list[Union] = []
        found: list[int] = []
        if hi - lo < t.short:
            gather_points(listed, self.starting, lo, hi, found)
        elif lo == 0 and hi == t.leaves - 1 and t.sub_limit > 1:
            # Live throughout: it meets every placed block, all in the root's sub union.
            every = self.sub[1]
            return ([every] if every else []), found
        else:
            for point in (lo, hi):
                got = listed[point]
                if got:
                    found += got
            if nodes is None:
                nodes = t.canonical(block)
            self._inside(nodes, unions, found)
            # The own unions on the paths up to its canonical nodes were read with those.
            up = t.own_up
            gather_path(self.own, up, up[nodes[0]], up[nodes[-1]], found, unions)
            return unions, found
        gather_path(self.own, t.own_up, lo + t.leaves, hi + t.leaves, found, unions)
        return unions, found

    def pick(self, block: int, size: int, align: int, best: bool, nodes: list[int] | None = None) -> int:
        """The offset for `block` (`size` bytes, > 0, a multiple of `align`) among the bytes
        `taken`: the lowest gap that fits, or with `best` the smallest; above everything
        when none fits."""
        unions, found = self.parts(block, nodes)
        return pick_among(unions, found, size, align, best)

    def place_run(
        self,
        facts: Iterable[tuple[int, int, int, int, int]],
        best: bool,
        top: int,
        limit: int,
        pools: list[Occupancy],
    ) -> tuple[list[int], int]:
        """Place blocks given in order as (block, size, align, lo, hi) in this, the only
        pool: `pick` among the bytes `taken`, then `insert`, inlined for short blocks.
        Stops after the block that takes the top past `limit`; returns the offsets of the
        blocks placed and the top."""
        t = self.timeline
        short, leaves = t.short, t.leaves
        listed, starting, own, up = self.listed, self.starting, self.own, t.own_up
        offsets: list[int] = []
        for i, size, align, lo, hi in facts:
            if size == 0:
                offsets.append(0)
                continue
            if hi - lo >= short:
                nodes = t.canonical(i)  # read once for the query and the updates
                at = self.pick(i, size, align, best, nodes)
                self.answered(i, pools, nodes)
                self.open -= 1
                self.insert(i, at, at + size, nodes)
            else:
                found: list[int] = []
                unions: list[Union] = []
                gather_points(listed, starting, lo, hi, found)
                gather_path(own, up, lo + leaves, hi + leaves, found, unions)
                at = pick_among(unions, found, size, align, best) if unions else pick(found, size, align, best)
                end = at + size
                if self.open:
                    self.insert(i, at, end)
                else:
                    for point in range(lo, hi + 1):
                        got = listed[point]
                        if got is None:
                            listed[point] = [at, end]
                        else:
                            got += (at, end)
                    got = starting[lo]
                    if got is None:
                        starting[lo] = [at, end]
                    else:
                        got += (at, end)
            offsets.append(at)
            if at + size > top:
                top = at + size
                if top > limit:
                    break
        return offsets, top

    def _inside(self, nodes: list[int], unions: list[Union], found: list[int]) -> None:
        """Blocks with a canonical node under one of `nodes` (a block's canonical nodes):
        sub unions, or the lists and own unions of a low node's subtree."""
        t = self.timeline
        leaves, listed, own, sub = t.leaves, self.listed, self.own, self.sub
        for node in nodes:
            if node < t.sub_limit:
                got = sub[node]
                if got:
                    if type(got) is list:
                        found += got
                    else:
                        unions.append(got)
                continue
            width = 1
            while node < leaves:
                for below in range(node, node + width):
                    got = own[below]
                    if got:
                        found += got  # a small subtree: few ranges
                node <<= 1
                width <<= 1
            for point in range(node - leaves, node - leaves + width):
                ranges = listed[point]
                if ranges:
                    found += ranges
                got = own[point + leaves]
                if got:
                    found += got

    def insert(self, block: int, start: int, end: int, nodes: list[int] | None = None) -> None:
        """Record bytes ``[start, end)`` (start < end) of a block (`nodes`, here and in
        `parts`, `pick` and `answered`: its canonical nodes when the caller has them)."""
        t = self.timeline
        lo, hi = t.lo[block], t.hi[block]
        if hi - lo < t.short:
            listed = self.listed
            for point in range(lo, hi + 1):
                got = listed[point]
                if got is None:
                    listed[point] = [start, end]
                else:
                    got += (start, end)
            got = self.starting[lo]
            if got is None:
                self.starting[lo] = [start, end]
            else:
                got += (start, end)
            if self.open:
                # The ancestors of its leaves hold those of its canonical nodes, and a sub
                # union below them covers a part of its range: taking it there is harmless.
                self._subs(t.sub_up[lo + t.leaves], t.sub_up[hi + t.leaves], start, end)
            return
        if nodes is None:
            nodes = t.canonical(block)
        _add_each(self.own, nodes, start, end)
        if self.open:
            wants, limit = self.wants, t.sub_limit
            _add_each(self.sub, [node for node in nodes if node < limit and wants[node]], start, end)
            # Every ancestor of a canonical node lies above the leftmost or the rightmost one.
            self._subs(t.sub_up[nodes[0]], t.sub_up[nodes[-1]], start, end)

    def _subs(self, x: int, y: int, start: int, end: int) -> None:
        """Add bytes to the sub unions still read on the paths up from nodes x and y.

        A sub union still read holds every range added to one below it (both took every
        add since the first, and a node is dropped for good): once the bytes lie inside a
        range of one, they lie inside one of each still-read node above it, and those are
        skipped."""
        sub, wants, up = self.sub, self.wants, self.timeline.sub_up
        inside_x = inside_y = False  # the bytes lie inside a range of a node on x's (y's) path
        while x != y:
            if x > y:
                node, x = x, up[x]
                if wants[node] and not inside_x:
                    inside_x = _add_one(sub, node, start, end)
            else:
                node, y = y, up[y]
                if wants[node] and not inside_y:
                    inside_y = _add_one(sub, node, start, end)
        if inside_x or inside_y:
            return
        while x:
            if wants[x] and _add_one(sub, x, start, end):
                return
            x = up[x]

    def answered(self, block: int, occupancies: list[Occupancy], nodes: list[int] | None = None) -> None:
        """Long `block` will query no more: nodes nobody else reads drop their sub union."""
        t = self.timeline
        wants, limit = self.wants, t.sub_limit
        for node in t.canonical(block) if nodes is None else nodes:
            if node < limit:
                wants[node] -= 1
                if not wants[node]:
                    for occupancy in occupancies:
                        occupancy.sub[node] = None


def _add_one(table: list[Union | None], node: int, start: int, end: int) -> bool:
    """`add` bytes ``[start, end)`` to the union of `node` in `table` (a new one where there
    is none), a list growing past `LONG` turned into an array; True when they lay inside
    one of its ranges already, touching neither end (nothing changed)."""
    flat = table[node]
    if flat is None:
        table[node] = [start, end]
        return False
    i = bisect_left(flat, start)
    j = bisect_right(flat, end)
    if i == j:
        if i & 1:
            return True
        flat.insert(i, end)  # in a gap, touching nothing
        flat.insert(i, start)
        if len(flat) > LONG and type(flat) is list:
            table[node] = array("q", flat)
        return False
    if i & 1:
        i -= 1
        start = flat[i]
    if j & 1:
        end = flat[j]
        j += 1
    if j > i + 2:
        del flat[i + 2 : j]
    flat[i] = start
    flat[i + 1] = end
    return False


def _add_each(table: list[Union | None], nodes: list[int], start: int, end: int) -> None:
    """`add` bytes ``[start, end)`` to the union of each of `nodes` in `table` (a new one
    where there is none), a list growing past `LONG` turned into an array: inlined, since
    every placed block goes into a dozen unions."""
    for node in nodes:
        flat = table[node]
        if flat is None:
            table[node] = [start, end]
            continue
        i = bisect_left(flat, start)
        j = bisect_right(flat, end)
        if i == j:
            if i & 1:
                continue  # inside a range already
            flat.insert(i, end)  # in a gap, touching nothing
            flat.insert(i, start)
            if len(flat) > LONG and type(flat) is list:
                table[node] = array("q", flat)
            continue
        low, high = start, end
        if i & 1:
            i -= 1
            low = flat[i]
        if j & 1:
            high = flat[j]
            j += 1
        if j > i + 2:
            del flat[i + 2 : j]
        flat[i] = low
        flat[i + 1] = high
