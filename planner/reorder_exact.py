"""The order of least peak live bytes, by a dynamic program over the graph's frontier.

The approach of SERENITY (Ahn et al., "Ordering Chaos: Memory-Aware Scheduling of Irregularly
Wired Neural Networks for Edge Devices", MLSys 2020):

1. A state is the set of steps already run; only sets closed under dependencies (every
   step's producers run before it) are states. The bytes live after a state do not depend on
   the order that reached it, so the best peak reaching each state is all one must remember.
2. Cut steps split the graph: a step that every other step precedes or follows is run at the
   same point by every order, so the steps between two cuts form a segment whose best order
   does not depend on the others'. The order's peak is the largest of the segments' peaks.
3. Within a segment, states are expanded cheapest peak first (a bottleneck Dijkstra, deeper
   states first among equals): the first complete state taken is an order of least peak.
   States whose peak reaches the best complete order known (the heuristic's) are dropped, so
   when none is left, that order is proven optimal.
4. Peaks below `floor` (a lower bound on the whole graph's peak, e.g. `must_live_floor`)
   count as `floor`: no order can do better than it anywhere, so the search goes straight
   down once a segment reaches it.
5. A step that frees at least what it keeps and stays under the current peak is run at once,
   alone: moving it first cannot raise any later step's live bytes.

Exact within its budget of seconds and states; past it the deepest state reached, completed
in the incumbent's order, replaces the incumbent when better, and the segment is reported not
proven. `beam_segment` is the same program keeping only the best states at each depth: fast,
not exact, a seed for the exact search.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.reorder_steps import StepGraph


@dataclass(frozen=True)
class SegmentResult:
    order: list[int] | None  # global step indices, None when no order beat the incumbent
    peak: int  # the segment's peak with `order` (or the incumbent's), counted at least `floor`
    proven: bool  # no order of the segment has a lower peak (below `floor`, all peaks are equal)
    bound: int  # a lower bound on the segment's least peak
    states: int


def cut_steps(g: StepGraph) -> list[int]:
    """Steps every other step precedes or follows (step 2 of the module doc), in order.

    The schedule's own order is topological (`StepGraph` refuses a read before its write), so a
    step is a cut exactly when all earlier steps are its ancestors and all later ones its
    descendants."""
    n = g.n
    ancestors = [0] * n
    for t in range(n):
        mask = 0
        for p in g.preds[t]:
            mask |= ancestors[p] | (1 << p)
        ancestors[t] = mask
    descendants = [0] * n
    for t in reversed(range(n)):
        mask = 0
        for s in g.succs[t]:
            mask |= descendants[s] | (1 << s)
        descendants[t] = mask
    return [t for t in range(n) if ancestors[t].bit_count() == t and descendants[t].bit_count() == n - 1 - t]


def segments(g: StepGraph) -> list[range]:
    """Ranges of the schedule's steps, each ending at a cut step (or the last step)."""
    bounds, start = [], 0
    for cut in cut_steps(g):
        bounds.append(range(start, cut + 1))
        start = cut + 1
    if start < g.n:
        bounds.append(range(start, g.n))
    return bounds


def must_live_floor(g: StepGraph, steps: range) -> int:
    """A lower bound on every order's peak, from one segment: while step t runs, a buffer is
    surely live when it is written before the segment or by t or one of t's ancestors, and is
    a graph output, read after the segment, or read by t or one of t's descendants."""
    lo, hi = steps.start, steps.stop
    seg = _Segment(g, steps)
    size = len(steps)
    ancestors = [0] * size  # each step and its ancestors in the segment, as bits
    for i in range(size):
        mask = 1 << i
        for p in range(size):
            if seg.preds[i] >> p & 1:
                mask |= ancestors[p]
        ancestors[i] = mask
    descendants = [0] * size
    for i in reversed(range(size)):
        mask = 1 << i
        for s in seg.succs[i]:
            mask |= descendants[s]
        descendants[i] = mask
    before = (g.writer < lo) & (g.size > 0)
    always = int(g.size[before & (g.is_output | (g.last_read >= hi))].sum()) if lo else 0
    buffers = []  # (writer bit or 0 when written before, local readers, size)
    for b in np.flatnonzero((g.size > 0) & (g.writer < hi) & ((g.writer >= lo) | (g.last_read >= lo))).tolist():
        if lo and g.writer[b] < lo and (g.is_output[b] or g.last_read[b] >= hi):
            continue  # counted in `always`
        readers = sum(1 << (r - lo) for r in g.readers[b] if lo <= r < hi)
        forever = bool(g.is_output[b] or g.last_read[b] >= hi)
        writer = 1 << (int(g.writer[b]) - lo) if g.writer[b] >= lo else 0
        buffers.append((writer, readers, forever, int(g.size[b])))
    floor = 0
    for i in range(size):
        live = always + seg.scratch[i]
        for writer, readers, forever, bytes_ in buffers:
            if writer and not ancestors[i] & writer:
                continue
            if forever or readers & descendants[i] or (writer == 1 << i and not readers):
                live += bytes_
        floor = max(floor, live)
    return floor


def solve_segment(
    g: StepGraph,
    steps: range,
    *,
    incumbent: int,
    floor: int,
    deadline: float,
    max_states: int,
    fallback: list[int],
) -> SegmentResult:
    """Least-peak order of `steps` (contiguous, all earlier steps already run), seeking an order
    whose peak is below `incumbent` (the peak of `fallback`, a valid order of `steps`)."""
    if incumbent <= floor:
        return SegmentResult(None, max(incumbent, floor), True, floor, 0)
    seg = _Segment(g, steps)
    full = (1 << len(steps)) - 1
    # state -> [peak, mem, ready, parent, step]
    seen: dict[int, list[int]] = {0: [floor, seg.start_mem, seg.start_ready, -1, -1]}
    heap: list[tuple[int, int, int]] = [(floor, 0, 0)]
    popped = 0
    deepest = (0, 0)  # (depth, state) of the deepest state taken
    while heap:
        key, depth, state = heapq.heappop(heap)
        entry = seen[state]
        if entry[0] != key:
            continue  # reached again later with a lower peak
        if state == full:
            return SegmentResult(seg.unwind(seen, state), key, True, key, len(seen))
        popped += 1
        if len(seen) > max_states or (popped % 512 == 0 and time.perf_counter() > deadline):
            return _stopped(g, seg, seen, deepest[1], key, incumbent, floor, fallback)
        if -depth > deepest[0]:
            deepest = (-depth, state)

        def worth(child: int, peak: int) -> bool:
            known = seen.get(child)
            return peak < incumbent and (known is None or known[0] > peak)

        for child, peak, change, ready, step in seg.children(state, entry, floor, worth):
            seen[child] = [peak, entry[1] + change, ready, state, step]
            heapq.heappush(heap, (peak, depth - 1, child))
    # Nothing below the incumbent: it is optimal.
    return SegmentResult(None, incumbent, True, incumbent, len(seen))


def _stopped(
    g: StepGraph,
    seg: _Segment,
    seen: dict[int, list[int]],
    state: int,
    bound: int,
    incumbent: int,
    floor: int,
    fallback: list[int],
) -> SegmentResult:
    """Out of budget: complete the deepest state taken in the fallback's order, keep it if it beats
    the incumbent, and report the peak level reached as the bound."""
    prefix = seg.unwind(seen, state)
    done = set(prefix)
    order = prefix + [t for t in fallback if t not in done]
    peak = max(seg.peaks(order) + [floor])
    if peak < incumbent:
        return SegmentResult(order, peak, False, bound, len(seen))
    return SegmentResult(None, incumbent, False, bound, len(seen))


def beam_segment(
    g: StepGraph, steps: range, *, floor: int, width: int, deadline: float
) -> tuple[list[int], int] | None:
    """A good order of `steps` fast: the frontier program kept to the `width` states of least
    (peak, live bytes) at each depth (a beam), and its peak; None past the deadline."""
    seg = _Segment(g, steps)
    layer: dict[int, list[int]] = {0: [floor, seg.start_mem, seg.start_ready, -1, -1]}
    layers = [layer]
    for _ in range(seg.size):
        if time.perf_counter() > deadline:
            return None
        nxt: dict[int, list[int]] = {}
        for state, entry in layer.items():
            for child, peak, change, ready, step in seg.children(state, entry, floor):
                mem = entry[1] + change
                known = nxt.get(child)
                if known is None or (peak, mem) < (known[0], known[1]):
                    nxt[child] = [peak, mem, ready, state, step]
        kept = sorted(nxt.items(), key=lambda item: (item[1][0], item[1][1], item[0]))[:width]
        layer = dict(kept)
        layers.append(layer)
    (state, entry), order = next(iter(layer.items())), []
    peak = entry[0]
    for depth in range(seg.size, 0, -1):
        entry = layers[depth][state]
        order.append(entry[4] + seg.lo)
        state = entry[3]
    return order[::-1], peak


class _Segment:
    """One segment's steps as bit positions, with what running each frees."""

    def __init__(self, g: StepGraph, steps: range) -> None:
        lo, hi = steps.start, steps.stop
        self.lo = lo
        self.size = len(steps)
        self.preds = [sum(1 << (p - lo) for p in g.preds[t] if p >= lo) for t in steps]
        self.succs = [sorted(s - lo for s in g.succs[t] if s < hi) for t in steps]
        self.new = [g.new_bytes[t] + g.scratch_bytes[t] for t in steps]
        self.keep = [g.new_bytes[t] for t in steps]
        self.scratch = [g.scratch_bytes[t] for t in steps]
        # A buffer dies after the last of its readers (or its writer, unread) in this segment
        # runs, unless a graph output or read after the segment.
        self.frees: list[list[tuple[int, int]]] = []
        for t in steps:
            frees = []
            for b in g.touched[t]:
                readers = g.readers[b]
                if g.is_output[b] or g.last_read[b] >= hi:
                    continue
                if not readers and g.writer[b] != t:
                    continue
                frees.append((sum(1 << (r - lo) for r in readers if r >= lo), int(g.size[b])))
            self.frees.append(frees)
        # Inputs nobody reads die after the first step.
        self.start_mem = g.input_bytes if lo == 0 else g.resident_after(lo)
        self.first_free = g.unread_input_bytes if lo == 0 else 0
        self.start_ready = sum(1 << i for i in range(self.size) if self.preds[i] == 0)

    def children(
        self, state: int, entry: list[int], floor: int, worth: Callable[[int, int], bool] | None = None
    ) -> list[tuple[int, int, int, int, int]]:
        """(child state, its peak, the change of live bytes, its ready steps, the step run) for
        each ready step; only one when a step can run at once (step 5 of the module doc). With
        `worth(child, peak)`, only the children it accepts are worked out in full."""
        level, mem, ready = entry[0], entry[1], entry[2]
        candidates = []
        r = ready
        while r:
            low = r & -r
            r ^= low
            i = low.bit_length() - 1
            live = mem + self.new[i]
            if live <= level and self.keep[i] <= self._freed(i, state | low):
                peak = max(level, live, floor)
                return [self._child(state, ready, low, i, peak)] if worth is None or worth(state | low, peak) else []
            candidates.append((low, i, max(level, live, floor)))
        out = []
        for low, i, peak in candidates:
            if worth is None or worth(state | low, peak):
                out.append(self._child(state, ready, low, i, peak))
        return out

    def _freed(self, i: int, child: int) -> int:
        freed = 0
        for readers, size in self.frees[i]:
            if readers | child == child:
                freed += size
        return freed

    def _child(self, state: int, ready: int, low: int, i: int, peak: int) -> tuple[int, int, int, int, int]:
        child = state | low
        after = self.new[i] - self.scratch[i] - self._freed(i, child) - (self.first_free if state == 0 else 0)
        next_ready = ready ^ low
        for s in self.succs[i]:
            if self.preds[s] | child == child:
                next_ready |= 1 << s
        return child, peak, after, next_ready, i

    def unwind(self, seen: dict[int, list[int]], state: int) -> list[int]:
        order = []
        while state:
            entry = seen[state]
            order.append(entry[4] + self.lo)
            state = entry[3]
        return order[::-1]

    def peaks(self, order: list[int]) -> list[int]:
        """Live bytes at each step of `order` (global indices of this segment's steps)."""
        state, mem, out = 0, self.start_mem, []
        for t in order:
            i = t - self.lo
            child = state | (1 << i)
            live = mem + self.new[i]
            out.append(live)
            mem = live - self.scratch[i] - sum(size for readers, size in self.frees[i] if readers | child == child)
            if state == 0:
                mem -= self.first_free
            state = child
        return out
