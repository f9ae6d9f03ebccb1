"""Exact planning for one pool: a skyline branch and bound that finds an arena of a given
size or proves there is none, and an anytime driver that tightens the size under a budget.

`planner.strategies.optimal` is the strategy built on it; this package knows blocks
(alias groups already merged), sizes, live ranges and alignments, nothing else.
"""

from planner.exact.driver import Budget, Outcome, decide, minimise
from planner.exact.limits import ExactInfeasibleError, check_time_limit
from planner.exact.model import Model
from planner.exact.search import Search

__all__ = [
    "Budget",
    "ExactInfeasibleError",
    "Model",
    "Outcome",
    "Search",
    "check_time_limit",
    "decide",
    "minimise",
]
