"""What the exact search precomputes once: time cut into sections, each block's span of
sections, and the order in which a niche's candidates are tried.

Sections are the intervals between consecutive distinct live-range endpoints: inside one
section the set of live blocks does not change, so a section's load and its floor (the
height below which everything is decided) summarise the whole interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.bounds import live_sum

# Orders in which the skyline search tries a niche's candidates: keys, most significant
# first, all descending. The driver runs "size" (the canonical search has its own ranks).
ORDERS = {
    "size": ("size", "length"),
}
# A dense block x section cover matrix makes the unallocated-floor bound one numpy call;
# above this many cells it costs more than it saves.
MAX_COVER_CELLS = 2_000_000


@dataclass(frozen=True)
class Model:
    """Blocks of one pool, by index: sizes, alignments and section spans ``[lo, hi)``."""

    size: np.ndarray
    align: np.ndarray
    first: np.ndarray
    last: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sections: int

    @classmethod
    def of(cls, size: np.ndarray, first: np.ndarray, last: np.ndarray, align: np.ndarray) -> Model:
        """Blocks live during steps ``first..last`` (inclusive); sizes must be > 0."""
        size, first, last, align = (np.asarray(a, dtype=np.int64) for a in (size, first, last, align))
        cuts = np.unique(np.concatenate((first, last + 1)))
        lo = np.searchsorted(cuts, first).astype(np.int64)
        hi = np.searchsorted(cuts, last + 1).astype(np.int64)
        return cls(size, align, first, last, lo, hi, max(len(cuts) - 1, 0))

    def __len__(self) -> int:
        return len(self.size)

    def load(self) -> np.ndarray:
        """Bytes live in each section (the live curve, `planner.bounds.live_sum`, by section)."""
        return live_sum(self.sections, self.lo, self.hi, self.size)

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

    def cover_matrix(self) -> np.ndarray | None:
        """Block x section booleans, or None when too large to pay for itself."""
        if len(self) * self.sections > MAX_COVER_CELLS:
            return None
        cover = np.zeros((len(self), self.sections), dtype=bool)
        for i, (lo, hi) in enumerate(zip(self.lo.tolist(), self.hi.tolist(), strict=True)):
            cover[i, lo:hi] = True
        return cover
