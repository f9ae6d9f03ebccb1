"""Skyline branch and bound: does every block fit under a given height?

The search builds a packing bottom-up. Each section has a *floor*: below it everything is
decided (occupied or wasted). A floor is *supported* when a placed block ends exactly there
(or it is the ground, 0): only there can a block rest in a packing where nothing can drop.

1. Take the lowest floor ``f`` among sections that still have blocks to place.
2. If no section at ``f`` is supported, nothing can rest at ``f``: raise the leftmost run of
   sections at ``f`` to its lower neighbour (the lowest block that will live there must
   reach over a neighbour and rest on it). With no neighbour the branch is dead.
3. Otherwise pick a supported section ``s`` at ``f`` with the fewest blocks that could rest
   there (fail first). Branch on which block is the first one above ``f`` in ``s``: each
   unplaced block live in ``s`` whose whole span is at ``f``, put at ``f`` (rounded up to
   its alignment); then the branch where none is, which lifts ``s`` just above ``f``.
   The branches split the packings apart, so each packing is met once.
4. Prune when a section's floor plus the sizes of its unplaced blocks exceeds the height,
   or when its floor must rise to the lowest start any of its unplaced blocks can have
   (the unallocated floor) and then overflows; this also proves infeasibility.
5. When no unplaced block lives across some section boundaries, the parts left and right
   are independent: solve them one after the other; if one fails, so does the whole.

These are MiniMalloc's ideas (canonical packings, section inference, decomposition; Moffitt,
ASPLOS 2023) recast as branching on the lowest niche, as exact rectangle packers do.
Complete: an exhausted search proves that no packing fits under the height.

Blocks whose height changes over time (alias groups' profiles) keep one flat bottom, so
every step above holds for them with their height section by section; a block 0 tall in
some section of its span (a group with a gap) would need floors to skip it there, which
this search does not do: the driver leaves such models to the canonical search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.exact.bounded import BoundedSearch
from planner.exact.stack import deep_recursion

_BIG = np.iinfo(np.int64).max // 4


@dataclass
class SkylineSearch(BoundedSearch):
    """One search over `model` under `height`, trying candidates in `order` (a key of `planner.exact.model.ORDERS`)."""

    order: str = "size"

    def run(self) -> np.ndarray | None:
        """Offsets (by block) of a packing under the height, or None when none exists.

        Raises `BudgetSpent` when the budget ends first.
        """
        m = self.model
        n = len(m)
        self._offset = np.zeros(n, dtype=np.int64)
        if n == 0:
            return self._offset
        if m.gaps:
            raise ValueError("the skyline search needs blocks with bytes in every section of their span")
        self._rank = m.rank(self.order)
        self._covering = m.covering(self._rank)
        # Every (block, section) cell of the blocks' spans, ordered by section: the lowest
        # start over the unplaced blocks of each section is one reduceat over them.
        spans = (m.hi - m.lo).astype(np.int64)
        cell_block = np.repeat(np.arange(n), spans)
        cell_section = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans) + m.lo[cell_block]
        by_section = np.argsort(cell_section, kind="stable")
        self._cell_block = cell_block[by_section]
        counts = np.bincount(cell_section, minlength=m.sections)
        self._cell_sections = np.flatnonzero(counts)  # sections with a block live in them
        self._cell_starts = (np.cumsum(counts) - counts)[self._cell_sections]
        self._spans = np.stack((m.lo, m.hi), axis=1).ravel()
        self._size_l = m.size.tolist()
        self._lo_l, self._hi_l = m.lo.tolist(), m.hi.tolist()
        S = m.sections
        state = (
            np.zeros(S, dtype=np.int64),  # floor
            np.ones(S, dtype=bool),  # supported
            m.load(),  # bytes still to place in each section
            m.crossings(),  # unplaced blocks across each section boundary
            np.zeros(n, dtype=bool),  # placed
        )
        if m.lower_bound() > self.height:
            return None
        # Depth is at most four frames per block; the default limit would stop large searches.
        with deep_recursion(4 * n):
            return self._offset if self._solve(state, 0, S) else None

    # ---- the recursion ------------------------------------------------------------------

    def _solve(self, state: tuple, a: int, b: int) -> bool:
        """Place every unplaced block living in sections ``[a, b)``; True on success."""
        self.tick()
        floor, supported, rest, cross, placed = state
        live = np.flatnonzero(rest[a:b])
        if live.size == 0:
            return True
        a, b = a + int(live[0]), a + int(live[-1]) + 1
        parts = _independent_parts(rest, cross, a, b)
        if len(parts) > 1:
            # The tightest part first: if any part fails, the others need not be tried.
            parts.sort(key=lambda p: (-int((floor[p[0] : p[1]] + rest[p[0] : p[1]]).max()), p[0]))
            return all(self._solve(state, lo, hi) for lo, hi in parts)
        return self._branch(state, a, b)

    def _branch(self, state: tuple, a: int, b: int) -> bool:
        m, height = self.model, self.height
        while True:
            floor, supported, rest, cross, placed = state
            span_rest = rest[a:b]
            active = span_rest > 0
            if not active.any():
                return True
            span_floor = floor[a:b]
            if ((span_floor + span_rest) > height).any() or not self._floor_bound_holds(state, a, b):
                return False
            level = np.where(active, span_floor, _BIG)
            f = int(level.min())
            at_f = level == f
            open_ = np.flatnonzero(at_f & supported[a:b])
            if open_.size == 0:
                raised = _raise_run(floor, active, at_f, a)
                if raised is None:
                    return False
                self.tick()
                state = (raised, supported, rest, cross, placed)
                continue
            s = a + int(open_[0]) if open_.size == 1 else self._fail_first(state, a, b, f, at_f, open_)
            run_lo, run_hi = _run_around(at_f, s - a)
            cov = self._covering[s]
            cov = cov[~placed[cov] & (m.lo[cov] >= a + run_lo) & (m.hi[cov] <= a + run_hi)]
            for c in cov.tolist():
                if self._try(state, c, f, a, b):
                    return True
            # No block rests at f in s: lift s just above f (nothing can start there now).
            if f + 1 + int(rest[s]) > height:
                return False
            self.tick()
            floor, supported = floor.copy(), supported.copy()
            floor[s], supported[s] = f + 1, False
            state = (floor, supported, rest, cross, placed)

    def _try(self, state: tuple, c: int, f: int, a: int, b: int) -> bool:
        floor, supported, rest, cross, placed = state
        align = int(self.model.align[c])
        at = -(-f // align) * align
        lo, hi = self._lo_l[c], self._hi_l[c]
        # Its height in each section: floor and bytes to place there move by the same amount.
        size = self.model.heights.get(c, self._size_l[c])
        if at + int(rest[lo:hi].max()) > self.height:
            return False
        floor, supported, rest, cross, placed = (x.copy() for x in state)
        floor[lo:hi] = at + size
        supported[lo:hi] = True
        rest[lo:hi] -= size
        cross[lo : hi - 1] -= 1
        placed[c] = True
        self._offset[c] = at
        return self._solve((floor, supported, rest, cross, placed), a, b)

    # ---- bounds and choices --------------------------------------------------------------

    def _floor_bound_holds(self, state: tuple, a: int, b: int) -> bool:
        """Lift each section to the lowest start of its unplaced blocks; does all still fit?"""
        floor, _, rest, _, placed = state
        m = self.model
        todo = ~placed & (m.lo >= a) & (m.hi <= b)
        if not todo.any():
            return True
        lowest = np.maximum.reduceat(np.append(floor, 0), self._spans)[::2]
        lowest = np.where(todo, -(-lowest // m.align) * m.align, _BIG)
        lifted = np.full(m.sections, _BIG, dtype=np.int64)
        lifted[self._cell_sections] = np.minimum.reduceat(lowest[self._cell_block], self._cell_starts)
        lifted = lifted[a:b]
        lifted = np.where(lifted < _BIG, lifted, 0)
        return not ((np.maximum(floor[a:b], lifted) + rest[a:b]) > self.height).any()

    def _fail_first(self, state: tuple, a: int, b: int, f: int, at_f: np.ndarray, open_: np.ndarray) -> int:
        """The open section with the fewest ways forward (blocks that fit, plus leaving it)."""
        _, _, rest, _, placed = state
        m = self.model
        todo = np.flatnonzero(~placed & (m.lo >= a) & (m.hi <= b))
        # A block fits at f when every section of its span is at f.
        off_f = np.concatenate(([0], np.cumsum(~at_f)))
        at = -(-f // m.align[todo]) * m.align[todo]
        fits = todo[(off_f[m.hi[todo] - a] == off_f[m.lo[todo] - a]) & (at + m.size[todo] <= self.height)]
        count = np.zeros(b - a + 1, dtype=np.int64)
        np.add.at(count, m.lo[fits] - a, 1)
        np.add.at(count, m.hi[fits] - a, -1)
        count = np.cumsum(count[:-1])
        can_leave = (f + 1 + rest[a:b]) <= self.height
        score = count[open_] + can_leave[open_]
        return a + int(open_[int(np.argmin(score))])


def _independent_parts(rest: np.ndarray, cross: np.ndarray, a: int, b: int) -> list[tuple[int, int]]:
    """Split ``[a, b)`` at boundaries no unplaced block crosses; keep parts with work."""
    cuts = np.flatnonzero(cross[a : b - 1] == 0)
    if cuts.size == 0:
        return [(a, b)]
    points = [a, *(cuts + a + 1).tolist(), b]
    return [(lo, hi) for lo, hi in zip(points[:-1], points[1:], strict=True) if rest[lo:hi].any()]


def _run_around(mask: np.ndarray, i: int) -> tuple[int, int]:
    """The maximal run ``[lo, hi)`` of True in `mask` containing index `i`."""
    falses = np.flatnonzero(~mask)
    lo = int(falses[falses < i].max()) + 1 if (falses < i).any() else 0
    hi = int(falses[falses > i].min()) if (falses > i).any() else len(mask)
    return lo, hi


def _raise_run(floor: np.ndarray, active: np.ndarray, at_f: np.ndarray, a: int) -> np.ndarray | None:
    """Floors with the leftmost lowest run lifted to its lower active neighbour, or None."""
    lo, hi = _run_around(at_f, int(np.flatnonzero(at_f)[0]))
    walls = []
    if lo > 0 and active[lo - 1]:
        walls.append(int(floor[a + lo - 1]))
    if hi < len(active) and active[hi]:
        walls.append(int(floor[a + hi]))
    if not walls:
        return None
    raised = floor.copy()
    raised[a + lo : a + hi] = min(walls)
    return raised
