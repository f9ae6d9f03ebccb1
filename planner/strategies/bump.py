"""bump: Samsung ONE onert's BumpPlanner.

1. Visit buffers in the order the schedule first uses them (first step, then problem order).
2. Give each the bytes just above the previous one; freed bytes are never handed out again.

A linear allocator: fast and simple, no reuse, so its arena is the naive sum
(`planner.bounds.naive`) plus alignment padding. Not optimal.

An alias group is one block, visited at its first member's first step and given
its tallest height (a linear allocator never reuses the bytes its profile frees).
"""

from __future__ import annotations

import time

from planner.orders import FIRST_USE
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "bump", origin="Samsung ONE (onert BumpPlanner)", summary="linear allocation in first-use order, no reuse", rank=10
)
def bump(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    placer.place_all(FIRST_USE.of(placer.blocks), rule="top")
    return placer.plan("bump", started)
