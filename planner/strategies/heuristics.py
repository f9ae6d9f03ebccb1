"""The greedy strategies `optimal` measures itself against: it never returns a plan larger
than the smallest of theirs that it ran."""

from __future__ import annotations

import time

from planner.errors import InfeasibleError
from planner.plan import Plan
from planner.problem import Problem
from planner.registry import registered

# Fastest first (first_fit sweeps), so that a short budget still gets a plan.
HEURISTICS = ("first_fit", "wic", "greedy_by_size", "best_fit", "greedy_by_conflicts", "greedy_by_breadth")


def best_heuristic(
    problem: Problem, deadline: float | None = None, floor: int = 0
) -> tuple[Plan | None, dict[str, int | str]]:
    """The smallest plan of the heuristics (None when none fits the capacities), and what
    each made. With a deadline (a `time.perf_counter` value) one starts only before it,
    the first one always, the others when the time left covers the longest run so far;
    none starts once a plan is down to `floor` bytes."""
    plans: list[Plan] = []
    tried: dict[str, int | str] = {}
    longest = 0.0
    for name in HEURISTICS:
        if tried and deadline is not None and deadline - time.perf_counter() < longest:
            break
        if plans and min(p.arena_bytes for p in plans) <= floor:
            break
        begun = time.perf_counter()
        try:
            result = registered()[name](problem)
        except InfeasibleError:
            tried[name] = "infeasible"
            continue
        tried[name] = result.arena_bytes
        plans.append(result)
        longest = max(longest, time.perf_counter() - begun)
    return (min(plans, key=lambda p: p.arena_bytes) if plans else None), tried
