"""Memory-aware ordering: a schedule of the same steps, respecting data dependencies, whose
peak of live bytes (LOAD) is as low as a time budget allows.

The order of the ops decides which tensors are alive together, so it bounds every plan
from below. The search:

1. Dependencies: a step depends on the step that writes each buffer it reads.
2. Greedy list scheduling: repeatedly run, among the steps whose inputs are ready, the one
   that raises the live bytes least while it runs (new outputs plus scratch), ties by the
   net bytes it leaves behind (outputs minus inputs it frees), then by original position.
3. Local search: move a random step to a random position between its last producer and its
   first consumer; keep the move when LOAD does not grow. Seeded and time-bounded.
4. Return the best order seen; the model's own order when nothing beats it.

Not optimal (finding the order of least peak memory is NP-hard), but never worse than the
order it was given.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from planner.bounds import live_sum
from planner.errors import ProblemError
from planner.lifetimes import Schedule, Step


@dataclass(frozen=True)
class Reordered:
    schedule: Schedule
    order: list[int]  # order[k] = index in the original schedule of the k-th step
    load_before: int
    load_after: int
    iterations: int


class _Graph:
    """The schedule as arrays: who writes, who reads, what each buffer weighs."""

    def __init__(self, schedule: Schedule) -> None:
        steps = schedule.steps
        self.n = len(steps)
        names = sorted({b for s in steps for b in (*s.reads, *s.writes, *s.scratch)} | set(schedule.inputs))
        index = {name: k for k, name in enumerate(names)}
        scratch = {b for s in steps for b in s.scratch}
        sizes = [0 if n in schedule.excluded else schedule.sizes.get(n, 0) for n in names]
        self.scratch_size = np.array(sizes, dtype=np.int64)
        # Scratch is counted only at its one step (below), not as a tensor live from the start.
        self.size = np.array(
            [0 if n in scratch else size for n, size in zip(names, sizes, strict=True)], dtype=np.int64
        )
        self.writer = np.full(len(names), -1, dtype=np.int64)  # -1: a graph input, live from the start
        for t, step in enumerate(steps):
            for name in step.writes:
                if self.writer[index[name]] == -1 and name not in schedule.inputs:
                    self.writer[index[name]] = t
        # A buffer aliasing another keeps that one's bytes alive: count the bytes once, at
        # the root, live until the last use of any buffer of the group.
        root = {name: _alias_root(name, schedule) for name in names}
        for name, r in root.items():
            if r != name:
                self.size[index[name]] = 0
        self.is_output = np.zeros(len(names), dtype=bool)
        self.is_output[[index[root.get(n, n)] for n in schedule.outputs]] = True
        read_pairs = [(index[b], t) for t, s in enumerate(steps) for b in s.reads]
        read_pairs += [(index[root[b]], t) for t, s in enumerate(steps) for b in s.reads if root[b] != b]
        self.read_buf = np.array([b for b, _ in read_pairs], dtype=np.int64)
        self.read_step = np.array([t for _, t in read_pairs], dtype=np.int64)
        scratch_pairs = [(index[b], t) for t, s in enumerate(steps) for b in s.scratch]
        self.scratch_buf = np.array([b for b, _ in scratch_pairs], dtype=np.int64)
        self.scratch_step = np.array([t for _, t in scratch_pairs], dtype=np.int64)
        self.preds: list[set[int]] = [set() for _ in range(self.n)]
        self.succs: list[set[int]] = [set() for _ in range(self.n)]
        for b, t in read_pairs:
            w = int(self.writer[b])
            if w == t:
                continue
            if w > t:
                raise ProblemError(f"step {t} ({steps[t].name}) reads {names[b]!r} before step {w} writes it")
            if w >= 0:
                self.preds[t].add(w)
                self.succs[w].add(t)
        self.names = names
        self.written = self.writer >= 0

    def load(self, position: np.ndarray) -> int:
        """LOAD of the order in which step t runs at `position[t]`."""
        n = self.n
        first = np.where(self.written, position[np.maximum(self.writer, 0)], 0)
        last = first.copy()
        if self.read_buf.size:
            np.maximum.at(last, self.read_buf, position[self.read_step])
        last[self.is_output] = n - 1
        size = self.size
        if self.scratch_buf.size:
            # Scratch is live for exactly the one step that uses it.
            at = position[self.scratch_step]
            first, last = np.concatenate((first, at)), np.concatenate((last, at))
            size = np.concatenate((size, self.scratch_size[self.scratch_buf]))
        return int(live_sum(n, first, last + 1, size).max()) if n else 0


def reorder(
    schedule: Schedule, *, time_limit: float = 1.0, seed: int = 0, max_iterations: int | None = None
) -> Reordered:
    """The best dependency-respecting order found within the budget (see the module doc)."""
    if time_limit <= 0:
        raise ProblemError(f"time_limit must be > 0 seconds, got {time_limit}")
    started = time.perf_counter()
    g = _Graph(schedule)
    identity = np.arange(g.n)
    before = g.load(identity)
    best_order = _greedy(schedule, g)
    best = g.load(_positions(best_order))
    if best > before:
        best_order, best = list(range(g.n)), before
    order, current = list(best_order), best
    rng = np.random.default_rng(seed)
    iterations = 0
    limit = max_iterations if max_iterations is not None else 1_000_000
    while g.n > 2 and iterations < limit and time.perf_counter() - started < time_limit:
        iterations += 1
        moved = _random_move(order, g, rng)
        if moved is None:
            continue
        value = g.load(_positions(moved))
        if value <= current:
            order, current = moved, value
            if value < best:
                best_order, best = list(moved), value
    steps = [schedule.steps[t] for t in best_order]
    result = Schedule(
        steps=steps,
        sizes=schedule.sizes,
        inputs=schedule.inputs,
        outputs=schedule.outputs,
        kinds=schedule.kinds,
        aliases=schedule.aliases,
        excluded=schedule.excluded,
    )
    return Reordered(result, best_order, before, best, iterations)


def _alias_root(name: str, schedule: Schedule) -> str:
    seen = {name}
    while name in schedule.aliases:
        name = schedule.aliases[name][0]
        if name in seen:
            raise ProblemError(f"aliases form a cycle through {name!r}")
        seen.add(name)
    return name


def _positions(order: list[int]) -> np.ndarray:
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return position


def _greedy(schedule: Schedule, g: _Graph) -> list[int]:
    """List scheduling by least growth of live bytes (step 2 of the module doc)."""
    steps: list[Step] = list(schedule.steps)
    index = {name: k for k, name in enumerate(g.names)}
    readers_left = (
        np.bincount(g.read_buf, minlength=len(g.names)) if g.read_buf.size else np.zeros(len(g.names), np.int64)
    )
    readers_left = readers_left.astype(np.int64)
    waiting = [len(p) for p in g.preds]
    ready = [(*_cost(steps[t], t, index, g, readers_left), t) for t in range(g.n) if waiting[t] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        *_, t = heapq.heappop(ready)
        order.append(t)
        for name in set(steps[t].reads):
            readers_left[index[name]] -= steps[t].reads.count(name)
        newly_ready = []
        for s in g.succs[t]:
            waiting[s] -= 1
            if waiting[s] == 0:
                newly_ready.append(s)
        # Costs depend on who is still waiting to read; refresh the ready set's keys.
        pending = [entry[-1] for entry in ready] + newly_ready
        ready = [(*_cost(steps[s], s, index, g, readers_left), s) for s in pending]
        heapq.heapify(ready)
    if len(order) != g.n:
        raise ProblemError("the schedule's dependencies form a cycle; no order can run it")
    return order


def _cost(step: Step, t: int, index: dict[str, int], g: _Graph, readers_left: np.ndarray) -> tuple[int, int, int]:
    grow = sum(int(g.size[index[b]]) for b in step.writes) + sum(int(g.scratch_size[index[b]]) for b in step.scratch)
    freed = 0
    for name in set(step.reads):
        k = index[name]
        if readers_left[k] == step.reads.count(name) and not g.is_output[k]:
            freed += int(g.size[k])
    written = sum(int(g.size[index[b]]) for b in step.writes)
    return grow, written - freed, t


def _random_move(order: list[int], g: _Graph, rng: np.random.Generator) -> list[int] | None:
    """Move one step to a random slot between its last producer and first consumer."""
    k = int(rng.integers(0, len(order)))
    t = order[k]
    position = {s: i for i, s in enumerate(order)}
    lo = max((position[p] for p in g.preds[t]), default=-1) + 1
    hi = min((position[s] for s in g.succs[t]), default=len(order)) - 1
    if hi <= lo:
        return None
    target = int(rng.integers(lo, hi + 1))
    if target == k:
        return None
    moved = order[:k] + order[k + 1 :]
    moved.insert(target, t)
    return moved
