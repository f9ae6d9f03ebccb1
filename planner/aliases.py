"""Alias groups: buffers that share bytes with another (in-place ops, views, concat slices).

A buffer with ``alias_of`` sits ``alias_offset`` bytes into the buffer it names; following
``alias_of`` links leads to a root. A root and everything aliasing it are placed as one
block, live from the earliest first step to the latest last step of its members.
"""

from __future__ import annotations

from planner.errors import ProblemError
from planner.problem import Problem


def alias_roots(problem: Problem) -> list[tuple[int, int]]:
    """For each buffer, the index of the buffer it ultimately aliases and its byte offset there."""
    bufs = problem.buffers
    index = {b.id: i for i, b in enumerate(bufs)}
    out: list[tuple[int, int] | None] = [None] * len(bufs)
    for start in range(len(bufs)):
        chain: list[int] = []
        i = start
        while out[i] is None and bufs[i].alias_of is not None:
            if i in chain:
                names = " -> ".join(bufs[j].id for j in chain + [i])
                raise ProblemError(f"alias_of forms a cycle: {names}")
            chain.append(i)
            i = index[bufs[i].alias_of]  # type: ignore[index]
        root, delta = out[i] or (i, 0)
        out[i] = (root, delta)
        for j in reversed(chain):
            delta += bufs[j].alias_offset
            out[j] = (root, delta)
    return [r for r in out if r is not None]


def blocks_of(problem: Problem) -> list[tuple[int, int, int]]:
    """(first, last, size) of every alias group, the units that occupy bytes."""
    groups: dict[int, list[int]] = {}
    bufs = problem.buffers
    for i, (root, delta) in enumerate(alias_roots(problem)):
        g = groups.setdefault(root, [bufs[i].first, bufs[i].last, 0])
        g[0] = min(g[0], bufs[i].first)
        g[1] = max(g[1], bufs[i].last)
        g[2] = max(g[2], delta + bufs[i].size)
    return [(g[0], g[1], g[2]) for g in groups.values()]
