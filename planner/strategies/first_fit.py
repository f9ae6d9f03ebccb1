"""first_fit: Samsung ONE onert's FirstFitPlanner.

1. Walk the schedule; a buffer is claimed at its first step and released after its last.
2. On a claim, scan the buffers still held, in offset order, and take the lowest gap big
   enough (or the bytes above the highest one).

Placing buffers in first-use order at the lowest offset free of every placed buffer that is
live at a common step is exactly that simulation. Not optimal: an early small buffer can
split the arena so that a later large one must go on top.

An alias group is one block, claimed at its first member's first step; the gap it takes
must hold each piece of its profile (its height step by step) while that piece lives.
"""

from __future__ import annotations

import time

from planner.orders import FIRST_USE
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "first_fit", origin="Samsung ONE (onert FirstFitPlanner)", summary="first-use order, lowest gap that fits", rank=20
)
def first_fit(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    placer.place_all(FIRST_USE.of(placer.blocks), rule="first")
    return placer.plan("first_fit", started)
