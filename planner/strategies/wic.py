"""wic: Samsung ONE onert's WICPlanner (weighted interference coloring).

1. Record which buffers interfere (are live at a common step), as the schedule claims and
   releases them.
2. Visit buffers by size, largest first (the weight), ties in first-use order.
3. Give each the lowest gap left by the already-placed buffers it interferes with.

Placing large buffers first leaves small ones to fill the holes. Not optimal.

An alias group's size here is its tallest height (the largest member end) and its
interference its whole span; the gap it takes must hold each piece of its profile.
"""

from __future__ import annotations

import time

from planner.orders import LARGEST
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "wic",
    origin="Samsung ONE (onert WICPlanner)",
    summary="largest first, lowest gap among interfering buffers",
    rank=30,
)
def wic(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    blocks = placer.blocks
    placer.place_all(LARGEST.of(blocks), rule="first")
    return placer.plan("wic", started)
