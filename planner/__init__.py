"""memplan's planner: place buffers with known sizes and lifetimes at offsets in an arena.

It knows nothing of ONNX, kernels or HTTP. Any runtime hands it a `Problem` and gets a
`Plan` back::

    from planner import plan, check_plan, Problem, Buffer
    problem = Problem(buffers=(Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 64, 2, 3)), steps=4)
    result = plan(problem, "greedy_by_size")
    assert check_plan(problem, result).ok and result.arena_bytes == 128

The yardsticks a plan is measured against (`live_bytes`, `live_segments`, `load`,
`peak_step`, `naive`, `ratio`) are defined once, in `planner.bounds`.
"""

from __future__ import annotations

from planner.bounds import live_bytes, live_segments, load, naive, peak_step, ratio
from planner.check import CheckResult, check_plan
from planner.errors import InfeasibleError, PlanningError, ProblemError, UnknownStrategyError
from planner.lifetimes import Schedule, Step, problem_from_schedule
from planner.plan import PLAN_SCHEMA, Placement, Plan
from planner.problem import MAX_BUFFERS, PROBLEM_SCHEMA, Buffer, Pool, Problem, make_problem
from planner.registry import Strategy, get, names, registered

DEFAULT_STRATEGY = "greedy_by_size"


def plan(problem: Problem, strategy: str = DEFAULT_STRATEGY, **options: object) -> Plan:
    """Plan `problem` with the named strategy (see `names()`); options go to the strategy."""
    return get(strategy)(problem, **options)


__all__ = [
    "DEFAULT_STRATEGY",
    "MAX_BUFFERS",
    "PLAN_SCHEMA",
    "PROBLEM_SCHEMA",
    "Buffer",
    "CheckResult",
    "InfeasibleError",
    "Placement",
    "Plan",
    "PlanningError",
    "Pool",
    "Problem",
    "ProblemError",
    "Schedule",
    "Step",
    "Strategy",
    "UnknownStrategyError",
    "check_plan",
    "get",
    "live_bytes",
    "live_segments",
    "load",
    "make_problem",
    "naive",
    "names",
    "peak_step",
    "plan",
    "problem_from_schedule",
    "ratio",
    "registered",
]
