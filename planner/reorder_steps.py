"""A schedule seen as a dependency graph of steps, with what each step costs in live bytes.

Shared by the memory-aware orderings (`planner.reorder`, `planner.reorder_exact`). Live bytes
follow `planner.lifetimes` exactly: a buffer is live from the step that writes it (graph inputs
from the first step) to the last step that reads it, graph outputs to the end, scratch for its
one step, and a group of aliases counts its bytes once, at its root.
"""

from __future__ import annotations

import numpy as np

from planner.bounds import live_sum
from planner.errors import ProblemError
from planner.lifetimes import Schedule


class StepGraph:
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
        root = {name: alias_root(name, schedule) for name in names}
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
        self._step_costs(read_pairs, scratch_pairs)

    def _step_costs(self, read_pairs: list[tuple[int, int]], scratch_pairs: list[tuple[int, int]]) -> None:
        """Per step: bytes it brings to life (`new_bytes`), its scratch, the buffers whose death
        it may decide (`touched`: read or written, with bytes), and who reads each buffer."""
        self.readers: list[set[int]] = [set() for _ in self.names]
        for b, t in read_pairs:
            self.readers[b].add(t)
        self.new_bytes = [0] * self.n
        self.scratch_bytes = [0] * self.n
        touched: list[set[int]] = [set() for _ in range(self.n)]
        for b, w in enumerate(self.writer.tolist()):
            if w >= 0 and self.size[b] > 0:
                self.new_bytes[w] += int(self.size[b])
                touched[w].add(b)
        for b, t in read_pairs:
            if self.size[b] > 0:
                touched[t].add(b)
        for b, t in scratch_pairs:
            self.scratch_bytes[t] += int(self.scratch_size[b])
        self.touched = [sorted(s) for s in touched]
        # The last step reading each buffer (-1: none), to tell what outlives a range of steps.
        self.last_read = np.full(len(self.names), -1, dtype=np.int64)
        if self.read_buf.size:
            np.maximum.at(self.last_read, self.read_buf, self.read_step)
        inputs = [b for b in range(len(self.names)) if self.writer[b] < 0 and self.size[b] > 0]
        self.input_bytes = sum(int(self.size[b]) for b in inputs)
        # Inputs nobody reads are live at the first step only (lifetimes' rule 5 from step 0).
        self.unread_input_bytes = sum(
            int(self.size[b]) for b in inputs if not self.readers[b] and not self.is_output[b]
        )

    def resident_after(self, count: int) -> int:
        """Bytes live after the first `count` steps of any order whose first `count` steps are
        those of the schedule (count >= 1): written before, and a graph output or read later."""
        alive = (self.writer < count) & (self.is_output | (self.last_read >= count))
        return int(self.size[alive].sum())

    def profile(self, position: np.ndarray) -> np.ndarray:
        """Live bytes at each step of the order in which step t runs at `position[t]`."""
        n = self.n
        if not n:
            return np.zeros(0, dtype=np.int64)
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
        return live_sum(n, first, last + 1, size)

    def load(self, position: np.ndarray) -> int:
        """LOAD of the order in which step t runs at `position[t]`."""
        return int(self.profile(position).max()) if self.n else 0

    def step_floor(self) -> int:
        """A lower bound on every order's LOAD: what one step alone holds live (what it reads,
        writes and scratches), and the graph inputs, all live at the first step."""
        floor = self.input_bytes
        for t in range(self.n):
            floor = max(floor, sum(int(self.size[b]) for b in self.touched[t]) + self.scratch_bytes[t])
        return floor


def alias_root(name: str, schedule: Schedule) -> str:
    seen = {name}
    while name in schedule.aliases:
        name = schedule.aliases[name][0]
        if name in seen:
            raise ProblemError(f"aliases form a cycle through {name!r}")
        seen.add(name)
    return name


def positions(order: list[int]) -> np.ndarray:
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return position
