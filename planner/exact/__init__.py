"""Exact planning for one pool: two branch-and-bound searches that find an arena of a given
size or prove there is none (MiniMalloc's canonical search, `CanonicalSearch` in `canonical`,
and a skyline search, `SkylineSearch` in `search`), and an anytime driver that restarts them
in turn and tightens the size under a budget (`driver`).

`planner.strategies.optimal` is the strategy built on it; this package knows blocks
(alias groups already merged), sizes, live ranges and alignments, nothing else.
"""

from planner.exact.canonical import CanonicalSearch
from planner.exact.driver import Budget, SearchResult, decide, minimise
from planner.exact.limits import ExactInfeasibleError, check_time_limit
from planner.exact.model import Model
from planner.exact.search import SkylineSearch

__all__ = [
    "Budget",
    "CanonicalSearch",
    "ExactInfeasibleError",
    "Model",
    "SearchResult",
    "SkylineSearch",
    "check_time_limit",
    "decide",
    "minimise",
]
