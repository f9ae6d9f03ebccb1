"""What the exact search precomputes once: time cut into sections, each block's span of
sections, and the order in which a niche's candidates are tried.

Sections are the intervals between consecutive distinct live-range endpoints: inside one
section the set of live blocks does not change, so a section's load and its floor (the
height below which everything is decided) summarise the whole interval.

A block whose height changes over time (an alias group's profile, `planner.aliases`) has
its height in each section of its span in `heights`; the others are `size` tall
throughout. Piece ends are section ends too, so a section never splits a piece.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.bounds import live_sum

# Orders in which the skyline search tries a niche's candidates: keys, most significant
# first, all descending. The driver runs "size" (the canonical search has its own ranks).
ORDERS = {
    "size": ("size", "length"),
}


@dataclass(frozen=True)
class Model:
    """Blocks of one pool, by index: sizes (the largest height), alignments, section spans
    ``[lo, hi)`` and, for blocks whose height changes, the height in each of their sections."""

    size: np.ndarray
    align: np.ndarray
    first: np.ndarray
    last: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sections: int
    heights: dict[int, np.ndarray] = field(default_factory=dict)  # block -> height by section of its span
    # The first step of each section, and the step after the last one.
    cuts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @classmethod
    def of(
        cls,
        size: np.ndarray,
        first: np.ndarray,
        last: np.ndarray,
        align: np.ndarray,
        profiles: Mapping[int, Sequence[tuple[int, int, int]]] | None = None,
    ) -> Model:
        """Blocks live during steps ``first..last`` (inclusive); sizes must be > 0. Block i
        in `profiles` is as tall as its pieces (first, last, height) say, and 0 between them."""
        size, first, last, align = (np.asarray(a, dtype=np.int64) for a in (size, first, last, align))
        profiles = profiles or {}
        ends = [(p[0], p[1] + 1) for pieces in profiles.values() for p in pieces]
        cuts = np.unique(np.concatenate((first, last + 1, np.array(ends, dtype=np.int64).ravel())))
        lo = np.searchsorted(cuts, first).astype(np.int64)
        hi = np.searchsorted(cuts, last + 1).astype(np.int64)
        heights = {}
        for i, pieces in profiles.items():
            by_section = np.zeros(int(hi[i] - lo[i]), dtype=np.int64)
            for a, b, h in pieces:
                by_section[np.searchsorted(cuts, a) - lo[i] : np.searchsorted(cuts, b + 1) - lo[i]] = h
            heights[i] = by_section
        return cls(size, align, first, last, lo, hi, max(len(cuts) - 1, 0), heights, cuts)

    def __len__(self) -> int:
        return len(self.size)

    @property
    def gaps(self) -> bool:
        """Whether some block is 0 tall in a section of its span (a group with no member
        live for a while): the skyline search needs every block's bottom to matter throughout."""
        return any(not h.all() for h in self.heights.values())

    def height_in(self, block: int) -> np.ndarray:
        """The block's height in each section of its span."""
        found = self.heights.get(block)
        if found is not None:
            return found
        return np.full(int(self.hi[block] - self.lo[block]), self.size[block], dtype=np.int64)

    def area(self) -> np.ndarray:
        """Bytes times steps of each block."""
        out = self.size * (self.last - self.first + 1)
        steps = np.diff(self.cuts)
        for i, h in self.heights.items():
            out[i] = int((h * steps[self.lo[i] : self.hi[i]]).sum())
        return out

    def load(self) -> np.ndarray:
        """Bytes live in each section (the live curve, `planner.bounds.live_sum`, by section)."""
        if not self.heights:
            return live_sum(self.sections, self.lo, self.hi, self.size)
        size = self.size.copy()
        size[list(self.heights)] = 0
        out = live_sum(self.sections, self.lo, self.hi, size)
        for i, h in self.heights.items():
            out[self.lo[i] : self.hi[i]] += h
        return out

    def lower_bound(self) -> int:
        """LOAD of these blocks, the most bytes live in one section: no packing is lower."""
        return int(self.load().max()) if len(self) else 0

    def height(self, offsets: np.ndarray) -> int:
        """The height of a packing: the highest end of a block at `offsets` (by block)."""
        return int((offsets + self.size).max()) if len(self) else 0

    def crossings(self) -> np.ndarray:
        """For each boundary between sections j and j+1, how many blocks live across it."""
        delta = np.zeros(self.sections + 1, dtype=np.int64)
        np.add.at(delta, self.lo, 1)
        np.add.at(delta, self.hi - 1, -1)
        return np.cumsum(delta[:-1])[:-1] if self.sections else delta[:0]

    def rank(self, order: str) -> np.ndarray:
        """Each block's position in the named candidate order (0 is tried first)."""
        keys = {"size": self.size, "length": self.last - self.first + 1}
        index = np.arange(len(self))
        by = np.lexsort((index, *(-keys[k] for k in reversed(ORDERS[order]))))
        rank = np.empty(len(self), dtype=np.int64)
        rank[by] = index
        return rank

    def covering(self, rank: np.ndarray) -> list[np.ndarray]:
        """For each section, the blocks live in it, in candidate order."""
        out = []
        for s in range(self.sections):
            found = np.flatnonzero((self.lo <= s) & (self.hi > s))
            out.append(found[np.argsort(rank[found], kind="stable")])
        return out
