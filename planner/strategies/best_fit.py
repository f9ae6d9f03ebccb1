"""best_fit: XLA's GlobalDecreasingSizeBestFitHeap, the better of its two orders.

1. Spatial order: buffers by size, largest first; ties by longer lifetime.
   Temporal order: buffers by lifetime length, longest first; ties by larger size.
2. For each order, place every buffer in the smallest free chunk that stays free for its
   whole lifetime (best fit), or at the top of the heap when none fits.
3. Keep the smaller of the two arenas (ties: spatial).

XLA runs either order depending on the backend; trying both never does worse than either.
The second order is given up as soon as its arena reaches the first's (it can no longer
win), so it costs less than a second whole run. Not optimal.

An alias group's size here is its tallest height and its lifetime its span, from its first
member's first step to its last member's last; the chunk it takes must hold each piece
of its profile (its height step by step) while that piece lives.
"""

from __future__ import annotations

import time

from planner.orders import LARGEST_LONGEST, LONGEST_LARGEST
from planner.placement import Placer
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import register


@register(
    "best_fit",
    origin="XLA (GlobalDecreasingSizeBestFitHeap)",
    summary="best of size-ordered and time-ordered best fit",
    rank=70,
)
def best_fit(problem: Problem, **_: object) -> Plan:
    started = time.perf_counter()
    placer = Placer(problem)
    b = placer.blocks
    orders = {"spatial": LARGEST_LONGEST.of(b), "temporal": LONGEST_LARGEST.of(b)}
    winner = placer.place_best_of(orders, rule="best")
    return placer.plan("best_fit", started, order=winner)
