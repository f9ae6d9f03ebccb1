"""Blocks: what the placement engine and the exact search place, one per alias group.

A problem's buffers with alias groups merged (`planner.aliases`): each block is placed at
one offset, its members at that offset plus their place in the group, and its height may
change over its span (its profile).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from planner.aliases import Piece, groups, profile
from planner.problem import Problem

if TYPE_CHECKING:
    from planner.plan import Plan


@dataclass(frozen=True)
class Blocks:
    """The problem's buffers with alias groups merged into single blocks.

    Block ``i`` spans the union of its members' live ranges and is as large as its largest
    member end (``alias_offset + size``): its ``size``, the height sort keys called "size"
    use. Arrays are indexed by block. A block whose height changes over its span has its
    profile in `profiles`: the pieces (first, last, height) of height > 0, in step order.
    """

    ids: list[str]  # the root buffer's id
    # (buffer index, byte offset within the block) of each block's members; None when
    # nothing aliases, so that block i is buffer i alone.
    members: list[list[tuple[int, int]]] | None
    first: np.ndarray
    last: np.ndarray
    size: np.ndarray
    align: np.ndarray
    candidates: list[tuple[int, ...]]  # pool indices in order of preference
    # block -> its profile's pieces of height > 0, for blocks not one piece of `size` over
    # their span; empty when every block is a rectangle (no aliases, or `planner.aliases.rigid`).
    profiles: dict[int, tuple[Piece, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, problem: Problem) -> Blocks:
        bufs = problem.buffers
        pool_index = {p.name: k for k, p in enumerate(problem.pools)}
        if all(b.alias_of is None for b in bufs):
            # The common case, kept vectorised: every buffer is its own block.
            n = len(bufs)
            if any(b.pool_candidates for b in bufs):
                candidates = [tuple(pool_index[n] for n in problem.candidates(b)) for b in bufs]
            else:
                candidates = [tuple(range(len(problem.pools)))] * len(bufs)
            return cls(
                ids=[b.id for b in bufs],
                members=None,
                first=np.fromiter((b.first for b in bufs), dtype=np.int64, count=n),
                last=np.fromiter((b.last for b in bufs), dtype=np.int64, count=n),
                size=np.fromiter((b.size for b in bufs), dtype=np.int64, count=n),
                align=np.fromiter((max(b.alignment or 1, problem.alignment) for b in bufs), dtype=np.int64, count=n),
                candidates=candidates,
            )
        roots, members = groups(problem)
        profiles: dict[int, tuple[Piece, ...]] = {}
        for k, m in enumerate(members):
            if len(m) > 1:
                spans = [(bufs[i].first, bufs[i].last, d + bufs[i].size) for i, d in m]
                pieces = tuple(p for p in profile(spans) if p[2])
                whole = (min(s[0] for s in spans), max(s[1] for s in spans), max(s[2] for s in spans))
                if pieces != (whole,) and whole[2]:
                    profiles[k] = pieces
        return cls(
            ids=[bufs[r].id for r in roots],
            members=members,
            first=np.array([min(bufs[i].first for i, _ in m) for m in members], dtype=np.int64),
            last=np.array([max(bufs[i].last for i, _ in m) for m in members], dtype=np.int64),
            size=np.array([max(d + bufs[i].size for i, d in m) for m in members], dtype=np.int64),
            align=np.array([max(problem.align_of(bufs[i]) for i, _ in m) for m in members], dtype=np.int64),
            candidates=[tuple(pool_index[n] for n in problem.candidates(bufs[m[0][0]])) for m in members],
            profiles=profiles,
        )

    def subset(self, chosen: np.ndarray, candidates: list[tuple[int, ...]] | None = None) -> Blocks:
        """The blocks at indices `chosen`, renumbered in that order (with other candidate pools)."""
        picked = chosen.tolist()
        where = {i: k for k, i in enumerate(picked)}
        return Blocks(
            ids=[self.ids[i] for i in picked],
            members=None if self.members is None else [self.members[i] for i in picked],
            first=self.first[chosen],
            last=self.last[chosen],
            size=self.size[chosen],
            align=self.align[chosen],
            candidates=candidates if candidates is not None else [self.candidates[i] for i in picked],
            profiles={where[i]: p for i, p in self.profiles.items() if i in where},
        )

    def pieces_of(self, block: int) -> tuple[Piece, ...]:
        """The profile of a block: (first, last, height) pieces of height > 0."""
        found = self.profiles.get(block)
        if found is not None:
            return found
        size = int(self.size[block])
        return ((int(self.first[block]), int(self.last[block]), size),) if size else ()

    def pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every block's pieces as arrays (block, first, last, height), blocks in order;
        a block of one piece as (first, last, size), empty ones included."""
        if not self.profiles:
            return np.arange(len(self), dtype=np.int64), self.first, self.last, self.size
        rows = [
            (i, *piece)
            for i in range(len(self))
            for piece in (self.profiles.get(i) or ((int(self.first[i]), int(self.last[i]), int(self.size[i])),))
        ]
        table = np.array(rows, dtype=np.int64).reshape(-1, 4)
        return table[:, 0], table[:, 1], table[:, 2], table[:, 3]

    def __len__(self) -> int:
        return len(self.ids)

    def offsets_in(self, plan: Plan) -> np.ndarray:
        """Each block's offset (its root buffer's) in a plan of the same problem."""
        return np.fromiter((plan.offsets[i].offset for i in self.ids), dtype=np.int64, count=len(self))

    def members_of(self, block: int) -> list[tuple[int, int]]:
        """(buffer index, byte offset within the block) of the block's members."""
        return [(block, 0)] if self.members is None else self.members[block]

    def conflict_counts(self) -> np.ndarray:
        """For each block, how many other blocks are live at a common step."""
        order = np.argsort(self.first, kind="stable")
        sorted_first = self.first[order]
        last_sorted = np.sort(self.last)
        # Blocks starting at or before my last step, minus those ending before my first.
        starts_before_end = np.searchsorted(sorted_first, self.last, side="right")
        ends_before_start = np.searchsorted(last_sorted, self.first, side="left")
        return (starts_before_end - ends_before_start - 1).astype(np.int64)
