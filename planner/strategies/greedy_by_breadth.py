"""greedy_by_breadth: TensorFlow Lite's GreedyByBreadth (GPU delegate), applied to offsets.

1. The breadth of a step is the total size of the buffers live at it (the live curve,
   `planner.bounds.live_sum`, over the stretches where it is constant).
2. Visit steps from the broadest to the narrowest (ties: earlier step first).
3. At each step, place the still-unplaced buffers live there, largest first (an alias
   group by its tallest height; its breadth counted step by step), each in the
   smallest gap that fits among placed buffers live at a common step (else on top).

TensorFlow Lite assigns shared objects this way; memplan uses the same visiting order with
best-fit offsets. Working the crowded steps first packs the peak tightly. Not optimal.
"""

from __future__ import annotations

import time

from planner.orders import BREADTH
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "greedy_by_breadth",
    origin="TensorFlow Lite (GreedyByBreadth)",
    summary="broadest steps first, largest first, best fit",
    rank=50,
)
def greedy_by_breadth(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    b = placer.blocks
    if len(b) == 0:
        return placer.plan("greedy_by_breadth", started)
    order = BREADTH.of(b)
    placer.place_all(order, rule="best")
    return placer.plan("greedy_by_breadth", started)
