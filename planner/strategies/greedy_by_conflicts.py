"""greedy_by_conflicts: Apache TVM USMP's greedy_by_conflicts.

1. Count each buffer's conflicts: the buffers live with it at some step.
2. Visit buffers with the most conflicts first; ties by size, largest first.
3. Give each the lowest offset free of its placed conflicts, in the first candidate pool
   where it fits.

Buffers entangled with many others are the hardest to fit, so they go first. Not optimal.

An alias group's conflicts are the blocks live during its span, its size its tallest
height; the offset it takes must hold each piece of its profile while that piece lives.
"""

from __future__ import annotations

import time

from planner.orders import CONFLICTED_LARGEST
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "greedy_by_conflicts",
    origin="Apache TVM USMP (greedy_by_conflicts)",
    summary="most-conflicted first, lowest fitting offset",
    rank=60,
)
def greedy_by_conflicts(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    b = placer.blocks
    order = CONFLICTED_LARGEST.of(b)
    placer.place_all(order, rule="first")
    return placer.plan("greedy_by_conflicts", started)
