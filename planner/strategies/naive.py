"""naive: no reuse at all, the yardstick every other strategy is measured against.

1. Take the buffers (alias groups, as one block each) in the problem's order.
2. Put each one above everything already placed in its pool.

Where it comes from: the baseline every memory-planning paper reports, and what a runtime
without a planner does. The arena is `planner.bounds.naive` (each alias group's size
once) plus alignment padding. Not optimal, on purpose.

An alias group is one block as tall as its tallest member end, stacked once.
"""

from __future__ import annotations

import time

from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register("naive", origin="no reuse (baseline)", summary="every buffer its own bytes; the sum of sizes", rank=0)
def naive(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    placer.place_all(range(len(placer.blocks)), rule="top")
    return placer.plan("naive", started)
