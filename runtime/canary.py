"""Canary mode: catch a plan that corrupts live data while the model runs.

Before the first step every byte of the arena is poisoned (0xFF: NaN in every float type,
-1 in signed integers), then the inputs are copied in. After each step:

1. every tensor that holds data, is live at that step and was not written by it must
   still have the checksum it had when it was written; if not, the step clobbered it and
   `CanaryError` names the step, the node, the damaged tensors and what the step wrote;
2. the checksums of the tensors the step wrote are recorded, and tensors whose last use
   was this step are forgotten;
3. every byte no remaining tensor owns is poisoned again, so a kernel that reads memory
   it does not own, or leaves part of its output unwritten, shows up as NaN downstream.

A plan that passes `planner.check_plan` never trips it; a plan edited to overlap two live
tensors does, at the first step where one overwrites the other.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from planner import Plan, Problem
from runtime.errors import CanaryError

POISON = 0xFF


class Canary:
    def __init__(self, problem: Problem, plan: Plan, arena: np.ndarray, writes: Sequence[Sequence[str]]) -> None:
        self.arena = arena
        self.problem = problem
        self.span = {b.id: (plan.offsets[b.id].offset, plan.offsets[b.id].offset + b.size) for b in problem.buffers}
        self.last = {b.id: b.last for b in problem.buffers}
        self.kind = {b.id: b.kind for b in problem.buffers}
        self.writes = [frozenset(w) for w in writes]
        self.held: dict[str, int] = {}  # buffer id -> checksum of its bytes

    def _checksum(self, buffer_id: str) -> int:
        lo, hi = self.span[buffer_id]
        return zlib.crc32(self.arena[lo:hi].data)

    def start(self, filled: Sequence[str]) -> None:
        """Poison everything, before the caller's data (`filled` buffers) is copied in."""
        self.arena.fill(POISON)
        self.held = {}
        self._pending = list(filled)

    def begin(self) -> None:
        """Record the checksums of the buffers filled before the first step."""
        self.held = {b: self._checksum(b) for b in self._pending}
        self._poison_free()

    def after(self, step: int, node: str) -> None:
        written = self.writes[step]
        damaged = [b for b, crc in self.held.items() if b not in written and self._checksum(b) != crc]
        if damaged:
            self._fail(step, node, damaged)
        for b in written:
            if b in self.span and self.kind[b] != "workspace":
                self.held[b] = self._checksum(b)
        if step == self.problem.steps - 1:
            return  # the outputs are read after the last step: leave them be
        for b in [b for b in self.held if self.last[b] <= step]:
            del self.held[b]
        self._poison_free()

    def _poison_free(self) -> None:
        owned = sorted(self.span[b] for b in self.held)
        cursor = 0
        for lo, hi in owned:
            if lo > cursor:
                self.arena[cursor:lo] = POISON
            cursor = max(cursor, hi)
        if cursor < self.arena.size:
            self.arena[cursor:] = POISON

    def _fail(self, step: int, node: str, damaged: list[str]) -> None:
        wrote = [b for b in sorted(self.writes[step]) if b in self.span]
        where = ", ".join(f"{b!r} at [{self.span[b][0]}, {self.span[b][1]})" for b in damaged)
        by = ", ".join(f"{b!r} at [{self.span[b][0]}, {self.span[b][1]})" for b in wrote)
        raise CanaryError(
            f"canary: step {step} (node {node!r}) changed live tensor(s) {where} that it does not write; "
            f"it wrote {by or 'nothing in the arena'}. The plan places live tensors in overlapping bytes.",
            step,
            node,
            damaged,
            clobbered={b: self._overlap(b, wrote) for b in damaged},
        )

    def _overlap(self, victim: str, wrote: list[str]) -> tuple[int, int, int]:
        """The bytes of `victim` that the step's own tensors cover: (first byte, end, how many), arena offsets."""
        lo, hi = self.span[victim]
        pieces = sorted((max(lo, self.span[b][0]), min(hi, self.span[b][1])) for b in wrote)
        pieces = [(a, z) for a, z in pieces if a < z]
        covered, cursor = 0, lo
        for a, z in pieces:
            a = max(a, cursor)
            if z > a:
                covered += z - a
                cursor = z
        return (pieces[0][0], max(z for _, z in pieces), covered) if pieces else (lo, hi, 0)
