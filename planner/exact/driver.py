"""Anytime use of the searches: decide a height, or tighten a height, within a budget.

A portfolio of searches restarts in turn under a node limit that doubles every round (as
MiniMalloc does with its orders): search times are heavy-tailed, one search is often
lucky where another thrashes, and a search that ends within its limit is a proof either
way. The portfolio is the skyline search (`planner.exact.search`), which packs some
perfect packings in a few hundred nodes, and the canonical search
(`planner.exact.canonical`) under MiniMalloc's three static ranks.

Both understand blocks whose height changes over time (alias groups' profiles, tied to one
offset); a model where a block has no bytes in some section of its span goes to the
canonical search alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.exact.bounded import BudgetSpent
from planner.exact.canonical import CanonicalSearch
from planner.exact.model import Model
from planner.exact.search import SkylineSearch

# (search, order, divisor of the round's node limit). A skyline node costs about four
# canonical ones (numpy state copied per node), so it gets a quarter of the nodes.
PORTFOLIO: tuple[tuple[type[SkylineSearch] | type[CanonicalSearch], str, int], ...] = (
    (SkylineSearch, "size", 4),
    (CanonicalSearch, "WAT", 1),
    (CanonicalSearch, "TAW", 1),
    (CanonicalSearch, "TWA", 1),
)


@dataclass
class Budget:
    """Seconds until `deadline` (a `time.perf_counter` value) and/or a number of nodes."""

    deadline: float | None = None
    max_nodes: int | None = None
    nodes: int = 0

    def spent(self) -> bool:
        if self.max_nodes is not None and self.nodes >= self.max_nodes:
            return True
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def limit(self, wanted: int) -> int:
        return wanted if self.max_nodes is None else max(0, min(wanted, self.max_nodes - self.nodes))


@dataclass
class SearchResult:
    """What is known after a budget: the best packing found and the proven lower bound.

    `status`: "optimal" (the packing meets the bound), "infeasible" (no packing fits the
    target: `lower_bound` exceeds it), "feasible" (a packing within the target, not proven
    smallest) or "timeout" (neither a packing within the target nor a proof).
    """

    status: str
    lower_bound: int
    offsets: np.ndarray | None = None  # by block; None without a packing within the target
    nodes: int = 0
    restarts: int = 0


def _round(model: Model, height: int, limit: int, budget: Budget) -> tuple[str, np.ndarray | None, int]:
    """Run each search of the portfolio once within its share of `limit` nodes.

    ("found", offsets), ("infeasible", None) or ("unknown", None), and how many ran.
    """
    tries = 0
    for kind, order, divisor in PORTFOLIO:
        if kind is SkylineSearch and model.gaps:
            continue  # the skyline search cannot skip a block's sections without bytes
        nodes = budget.limit(max(1, limit // divisor))
        if nodes <= 0 or budget.spent():
            break
        search = kind(model, height, order, node_limit=nodes, deadline=budget.deadline)
        tries += 1
        try:
            offsets = search.run()
        except BudgetSpent:
            continue
        finally:
            budget.nodes += search.nodes
        if offsets is None:
            return "infeasible", None, tries
        return "found", offsets.copy(), tries
    return "unknown", None, tries


def _first_limit(model: Model) -> int:
    return max(64, 2 * len(model))


def decide(model: Model, target: int, budget: Budget) -> SearchResult:
    """A packing no higher than `target`, a proof that none exists, or "timeout"."""
    lower = model.lower_bound()
    if target < lower:
        return SearchResult("infeasible", lower)
    limit, restarts = _first_limit(model), 0
    while not budget.spent():
        verdict, offsets, tries = _round(model, target, limit, budget)
        restarts += tries
        if verdict == "found":
            height = model.height(offsets)  # type: ignore[arg-type]
            status = "optimal" if height <= lower else "feasible"
            return SearchResult(status, lower, offsets, budget.nodes, restarts)
        if verdict == "infeasible":
            return SearchResult("infeasible", target + 1, nodes=budget.nodes, restarts=restarts)
        limit *= 2
    return SearchResult("timeout", lower, nodes=budget.nodes, restarts=restarts)


def minimise(model: Model, incumbent: np.ndarray, budget: Budget, *, cap: int | None = None) -> SearchResult:
    """Tighten `incumbent` (offsets of a valid packing) towards the smallest height.

    Each round first asks for a packing at the lower bound (often the answer, and then
    proven at once), then for one just below the best so far; a proven "no" raises the
    bound. Ends at the budget or when the best meets the bound (then "optimal"). With
    `cap`, packings higher than `cap` do not count as feasible.
    """
    lower = model.lower_bound()
    best, best_height = incumbent, model.height(incumbent)
    limit, restarts = _first_limit(model), 0
    while best_height > lower and not budget.spent():
        for target in dict.fromkeys((lower, best_height - 1)):
            if target < lower or budget.spent():
                continue
            verdict, offsets, tries = _round(model, target, limit, budget)
            restarts += tries
            if verdict == "found" and offsets is not None:
                best, best_height = offsets, model.height(offsets)
            elif verdict == "infeasible":
                lower = max(lower, target + 1)
            if best_height <= lower:
                break
        limit *= 2
    within = cap is None or best_height <= cap
    status = "optimal" if best_height <= lower else ("feasible" if within else "timeout")
    return SearchResult(status, lower, best, budget.nodes, restarts)
