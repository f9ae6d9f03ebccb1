"""Canonical branch and bound: does every block fit under a given height?

Blocks are placed one at a time, each at its *lowest offset* (just above the highest block
already placed that it meets in time, rounded up to its alignment), so a branch is only
an order of blocks. The search keeps to canonical orders and prunes with what each
section of time still has to hold:

1. Candidates are the unplaced blocks sorted by (lowest offset, static rank). Along a
   branch offsets never decrease and, at equal offsets, ranks increase: each packing is
   reached by one order only.
2. A block whose lowest offset is at or above the lowest top any unplaced block could
   have would leave a gap under itself that a smaller packing fills: it is not tried.
3. A section's *floor* is where its next block can start: the lowest offset of its
   unplaced blocks (each at or above the top of every placed block it meets, so this is
   at least the top of the section's highest placed block). Prune when a floor (or the
   current offset, since offsets never decrease) plus the bytes still to place in the
   section exceeds the height. Floors are not stored: lowest offsets only rise along a
   branch, so a placement checks the sections of the blocks it raised, and stops at the
   first unplaced block low enough.
4. When no unplaced block lives across a section boundary, the two sides are independent
   and solved one after the other (each with its own ranks); if one fails, so does all.
5. A placed block that meets no unplaced block cannot be what made its branch fail:
   when its branch fails, so does the node.

This is the search published with MiniMalloc (Moffitt, ASPLOS 2023): canonical solutions,
dominance, section inference with monotonic and unallocated floors, dynamic
decomposition and "hatless" pruning, with its static ranks (width, area, and the most
bytes live in the block's sections). Complete: an exhausted search is a proof.

State lives in plain lists: at a few hundred blocks, Python's own integers and lists beat
numpy's per-call cost for this many small updates. A node passes its unplaced blocks to
its children, and sorts only the few candidates between the current offset and the
ceiling of step 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.exact.bounded import BoundedSearch
from planner.exact.model import Model
from planner.exact.stack import deep_recursion

# Static ranks, tried in turn by the driver: keys most significant first, all descending.
# "total" is the most bytes live (still to place) in any section the block spans.
ORDERS = {
    "WAT": ("width", "area", "total"),
    "TAW": ("total", "area", "width"),
    "TWA": ("total", "width", "area"),
}
_BIG = 1 << 62


@dataclass
class CanonicalSearch(BoundedSearch):
    """One search over `model` under `height`, ranking blocks by `order` (a key of ORDERS)."""

    order: str = "WAT"

    def run(self) -> np.ndarray | None:
        """Offsets (by block) of a packing under the height, or None when none exists.

        Raises `BudgetSpent` when the budget ends first.
        """
        m = self.model
        n = len(m)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if m.lower_bound() > self.height:
            return None
        with deep_recursion(3 * n):
            offsets = _Solver(m, self.height, ORDERS[self.order], self).solve()
        return None if offsets is None else np.asarray(offsets, dtype=np.int64)


class _Solver:
    """The state of one search, in lists indexed by block and by section."""

    def __init__(self, m: Model, height: int, keys: tuple[str, ...], owner: CanonicalSearch) -> None:
        self.owner = owner
        self.height = height
        self.keys = keys
        self.size = m.size.tolist()
        self.align = m.align.tolist()
        self.lo, self.hi = m.lo.tolist(), m.hi.tolist()
        self.width = (m.last - m.first + 1).tolist()
        n, sections = len(m), m.sections
        self.area = m.area().tolist()
        # Height of a block in each section of its span; None: `size` throughout.
        self.heights: list[list[int] | None] = [None] * n
        for i, by_section in m.heights.items():
            self.heights[i] = by_section.tolist()
        self.members: list[list[int]] = [[] for _ in range(sections)]
        for i in range(n):
            for s, h in zip(range(self.lo[i], self.hi[i]), self._height_list(i), strict=True):
                if h:
                    self.members[s].append(i)
        self.overlaps, self.rise = _overlaps(m)
        # A hint per section, never restored: a block live there that was unplaced and low
        # enough when last looked at (checked before it is trusted).
        self.witness = [found[0] if found else 0 for found in self.members]
        self.total = m.load().tolist()
        cross = m.crossings().tolist()
        self.cross = cross
        self.lowest = [0] * n  # lowest offset each unplaced block can take now
        self.offset = [-1] * n  # -1: unplaced

    def _height_list(self, i: int) -> list[int]:
        found = self.heights[i]
        return found if found is not None else [self.size[i]] * (self.hi[i] - self.lo[i])

    def solve(self) -> list[int] | None:
        """Solve each independent part in turn; None when one cannot be packed."""
        cuts = [0, *(s + 1 for s, c in enumerate(self.cross) if c == 0), len(self.total)]
        result = [0] * len(self.size)
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            part = [i for i in range(len(self.size)) if a <= self.lo[i] and self.hi[i] <= b]
            if part and not self._part(part, a, b, result):
                return None
        return result

    def _part(self, part: list[int], a: int, b: int, result: list[int]) -> bool:
        """Search sections ``[a, b)`` for the unplaced blocks `part` (all inside it)."""
        width, area, total, lo, hi = self.width, self.area, self.total, self.lo, self.hi
        columns = {
            "width": lambda: [-width[i] for i in part],
            "area": lambda: [-area[i] for i in part],
            "total": lambda: [-max(total[lo[i] : hi[i]]) for i in part],
        }
        # Keys most significant first, each descending, then the block (unique).
        ranked = [row[-1] for row in sorted(zip(*(columns[k]() for k in self.keys), part, strict=True))]
        rank = {i: r for r, i in enumerate(ranked)}
        return self._search(rank, ranked, a, b, 0, 0, result)

    def _search(
        self, rank: dict[int, int], todo: list[int], a: int, b: int, at_least: int, after: int, result: list[int]
    ) -> bool:
        """Place the blocks `todo` (the unplaced ones of this part), each at or above
        `at_least` (and after rank `after` there)."""
        self.owner.tick()
        if not todo:
            return True
        offset, lowest, size = self.offset, self.lowest, self.size
        # No block may start at or above the lowest top an unplaced block can reach, nor
        # so high that some section's bytes to place no longer fit above it.
        ceiling = min([lowest[i] + size[i] for i in todo])
        ceiling = min(ceiling, self.height - max(self.total[a:b]) + 1)
        # Only the few blocks starting between the current offset and the ceiling are tried:
        # filtering before sorting keeps the sort small. (offset, rank) is unique.
        candidates = sorted([(v, rank[i], i) for i in todo if at_least <= (v := lowest[i]) < ceiling])
        for at, r, i in candidates:
            if at == at_least and r < after:
                continue
            placed = self._place(i, at)
            if placed is None:
                if not any(offset[j] < 0 for j in self.overlaps[i]):
                    return False  # hatless: nothing else at this node can do better
                continue
            raised, hatless = placed
            result[i] = at
            try:
                found = self._descend(rank, todo, i, at, r, a, b, result)
            finally:
                self._unplace(i, raised)
            if found:
                return True
            if hatless:
                return False
        return False

    def _place(self, i: int, at: int) -> tuple[list[tuple[int, int]], bool] | None:
        """Put block `i` at `at` and propagate; None (and nothing changed) when it cannot be.

        Returns the lowest offsets it raised (to put back) and whether it is hatless."""
        # The caller has checked that every section's bytes to place fit above `at` (offsets
        # never decrease along a branch); that covers the sections under the block too.
        total = self.total
        lo, hi = self.lo[i], self.hi[i]
        heights = self.heights[i]
        if heights is None:
            size = self.size[i]
            for s in range(lo, hi):
                total[s] -= size
        else:
            for s, h in zip(range(lo, hi), heights, strict=True):
                total[s] -= h
        self.offset[i] = at
        raised: list[tuple[int, int]] = []
        offset, lowest, align = self.offset, self.lowest, self.align
        lo_of, hi_of = self.lo, self.hi
        hatless = True
        touched: set[int] = set()
        for j, rise in zip(self.overlaps[i], self.rise[i], strict=True):
            if offset[j] >= 0:
                continue
            hatless = False
            top = at + rise  # its highest byte in the sections both live in
            if lowest[j] >= top:
                continue
            raised.append((j, lowest[j]))
            lowest[j] = -(-top // align[j]) * align[j]
            touched.update(range(lo_of[j], hi_of[j]))
        # A section's floor (the unallocated floor): its unplaced blocks all start at or above
        # the lowest of their lowest offsets, so its bytes still to place must fit above that.
        # Lowest offsets only rise along a branch, so only sections of raised blocks can fail
        # here; a section fails when no unplaced block can start at or below its slack.
        height, witness, members = self.height, self.witness, self.members
        for s in touched:
            rest = total[s]
            if not rest:
                continue
            slack = height - rest
            j = witness[s]
            if offset[j] < 0 and lowest[j] <= slack:
                continue
            for j in members[s]:
                if offset[j] < 0 and lowest[j] <= slack:
                    witness[s] = j
                    break
            else:
                self._unplace(i, raised)
                return None
        return raised, hatless

    def _unplace(self, i: int, raised: list[tuple[int, int]]) -> None:
        total, lowest = self.total, self.lowest
        heights = self.heights[i]
        if heights is None:
            size = self.size[i]
            for s in range(self.lo[i], self.hi[i]):
                total[s] += size
        else:
            for s, h in zip(range(self.lo[i], self.hi[i]), heights, strict=True):
                total[s] += h
        for j, v in reversed(raised):
            lowest[j] = v
        self.offset[i] = -1

    def _descend(
        self, rank: dict[int, int], todo: list[int], i: int, at: int, r: int, a: int, b: int, result: list[int]
    ) -> bool:
        """Go on after placing `i`: in the same part, or in each part it split off."""
        cross = self.cross
        lo, hi = self.lo[i], self.hi[i]
        cuts = [a]
        for s in range(lo, hi - 1):
            cross[s] -= 1
            if cross[s] == 0:
                cuts.append(s + 1)
        try:
            if len(cuts) == 1:
                rest = todo.copy()
                rest.remove(i)
                return self._search(rank, rest, a, b, at, r, result)
            cuts.append(b)
            offset, lo_of, hi_of = self.offset, self.lo, self.hi
            for pa, pb in zip(cuts[:-1], cuts[1:], strict=True):
                part = [j for j in todo if offset[j] < 0 and lo_of[j] < pb and pa < hi_of[j]]
                if part and not self._part(part, pa, pb, result):
                    return False
            return True
        finally:
            for s in range(lo, hi - 1):
                cross[s] += 1


def _overlaps(m: Model) -> tuple[list[list[int]], list[list[int]]]:
    """For each block, the other blocks live at some common section (with bytes in it),
    and how high the block reaches above its offset in the sections they share."""
    n = len(m)
    lo, hi = m.lo, m.hi
    meets_of, rise_of = [], []
    for i in range(n):
        meets = [j for j in np.flatnonzero((lo < hi[i]) & (lo[i] < hi)).tolist() if j != i]
        if not m.heights or (i not in m.heights and not any(j in m.heights for j in meets)):
            meets_of.append(meets)
            rise_of.append([int(m.size[i])] * len(meets))
            continue
        mine = m.height_in(i)
        kept, rises = [], []
        for j in meets:
            a, b = max(lo[i], lo[j]), min(hi[i], hi[j])
            theirs = m.height_in(j)[a - lo[j] : b - lo[j]]
            shared = mine[a - lo[i] : b - lo[i]][theirs > 0]
            if shared.size and shared.max() > 0:
                kept.append(j)
                rises.append(int(shared.max()))
        meets_of.append(kept)
        rise_of.append(rises)
    return meets_of, rise_of
