"""Alias groups: buffers that share bytes with another (in-place ops, views, concat slices).

A buffer with ``alias_of`` sits ``alias_offset`` bytes into the buffer it names; following
``alias_of`` links leads to a root. A root and everything aliasing it are placed at one
offset, the group's base, and the group is a block whose size changes over time: its
*profile* gives, at each step, the height its live members reach above the base (the
largest ``alias_offset + size`` of the members live then), as a few (first, last, height)
pieces. Bytes above that height are free for other blocks at that step: the members that
needed them are dead or not yet made. A group of one buffer is one piece, its size.

`rigid` turns a problem into the older view, every group one rectangle (live from its
earliest member's first step to its latest member's last step, as tall as its tallest
member end), so that both can be planned and compared.
"""

from __future__ import annotations

import dataclasses
import heapq

from planner.errors import ProblemError
from planner.problem import Problem

Piece = tuple[int, int, int]  # (first step, last step, height above the group's base)


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


def groups(problem: Problem) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """The alias groups in order of their first buffer: each root's index, and each group's
    members as (buffer index, byte offset within the group), the root among them."""
    index: dict[int, int] = {}
    roots: list[int] = []
    members: list[list[tuple[int, int]]] = []
    for i, (root, delta) in enumerate(alias_roots(problem)):
        if root not in index:
            index[root] = len(roots)
            roots.append(root)
            members.append([])
        members[index[root]].append((i, delta))
    return roots, members


def profile(spans: list[tuple[int, int, int]]) -> list[Piece]:
    """The profile of a group whose members are given as (first, last, end), `end` being
    the member's ``alias_offset + size``: pieces (first, last, height) in step order, the
    height the largest end among the members live at those steps, neighbours of equal
    height merged. Steps inside the group's span where no member lives are pieces of
    height 0, so that the pieces cover the span exactly. O(m log m) for m members."""
    if len(spans) == 1:
        return [spans[0]]
    starts = sorted(spans)
    cuts = sorted({s[0] for s in spans} | {s[1] + 1 for s in spans})
    live: list[tuple[int, int]] = []  # (-end, last) of members begun, dropped lazily
    pieces: list[Piece] = []
    k = 0
    for step, following in zip(cuts[:-1], cuts[1:], strict=True):
        while k < len(starts) and starts[k][0] <= step:
            heapq.heappush(live, (-starts[k][2], starts[k][1]))
            k += 1
        while live and live[0][1] < step:
            heapq.heappop(live)
        height = -live[0][0] if live else 0
        if pieces and pieces[-1][2] == height:
            pieces[-1] = (pieces[-1][0], following - 1, height)
        else:
            pieces.append((step, following - 1, height))
    return pieces


def group_profiles(problem: Problem) -> list[list[Piece]]:
    """The profile of every alias group, in the order of `groups`."""
    bufs = problem.buffers
    _, members = groups(problem)
    return [profile([(bufs[i].first, bufs[i].last, d + bufs[i].size) for i, d in m]) for m in members]


def blocks_of(problem: Problem) -> list[tuple[int, int, int]]:
    """(first, last, size) of every alias group as one rectangle: its span and its tallest
    height (what `naive` counts: a group's bytes once)."""
    return [(p[0][0], p[-1][1], max(h for _, _, h in p)) for p in group_profiles(problem)]


def pieces_of(problem: Problem) -> list[Piece]:
    """Every piece of every group's profile (the units that occupy bytes, step by step)."""
    return [piece for p in group_profiles(problem) for piece in p if piece[2] > 0]


def rigid(problem: Problem) -> Problem:
    """The same problem with every alias group planned as one rectangle: each member's live
    range stretched to its group's span, so that every profile is one piece as tall as
    the group's tallest member end. Any plan of the result is a plan of `problem` (only
    longer lives are asked for); it is how groups were planned before profiles, kept for
    comparison."""
    if all(b.alias_of is None for b in problem.buffers):
        return problem
    bufs = list(problem.buffers)
    _, members = groups(problem)
    for m in members:
        if len(m) < 2:
            continue
        first = min(bufs[i].first for i, _ in m)
        last = max(bufs[i].last for i, _ in m)
        for i, _ in m:
            bufs[i] = dataclasses.replace(bufs[i], first=first, last=last)
    return problem.replace(buffers=tuple(bufs))
