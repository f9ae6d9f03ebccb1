"""greedy_by_size: TensorFlow Lite's GreedyBySize offset assignment (GPU delegate, and the
same idea in TFLite Micro's GreedyMemoryPlanner).

1. Sort buffers by size, largest first; ties by first use.
2. For each, look at the placed buffers live at a common step, in offset order, and
   collect the gaps between them.
3. Take the smallest gap that fits (best fit); if none fits, place it above the highest.

Among the best simple heuristics in practice; not optimal.

An alias group's size here is its tallest height (the largest member end); the gap it
takes must hold each piece of its profile (its height step by step) while that piece lives.
"""

from __future__ import annotations

import time

from planner.orders import LARGEST
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register("greedy_by_size", origin="TensorFlow Lite (GreedyBySize)", summary="largest first, best-fitting gap", rank=40)
def greedy_by_size(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    blocks = placer.blocks
    placer.place_all(LARGEST.of(blocks), rule="best")
    return placer.plan("greedy_by_size", started)
