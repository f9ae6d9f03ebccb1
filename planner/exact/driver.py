"""Anytime use of the searches: decide a height, or tighten a height, within a budget.

A portfolio of searches runs in turn under a node limit that grows every round (MiniMalloc
doubles it with its orders): search times are heavy-tailed, one search is often lucky where
another thrashes, and a search that ends within its limit is a proof either way. Where
MiniMalloc restarts each search under the larger limit, walking again every node it walked
before, each search here goes on where it stopped (`planner.exact.resume`). With no
restart to pay for, the limit grows by a quarter a round rather than doubling: the
searches move on nearly abreast, and when one ends after N nodes the others have spent
little more than N each (on MiniMalloc's challenging instances, 151,628 nodes in all with
doubling, 126,844 with quarters). The portfolio is the skyline search
(`planner.exact.search`), which packs some perfect packings in a few hundred nodes, and
the canonical search (`planner.exact.canonical`) under MiniMalloc's three static ranks.

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
from planner.exact.resume import Resumable
from planner.exact.search import SkylineSearch

# Each round's node limit is the last one plus a GROWTH-th of it.
GROWTH = 4
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


class _Portfolio:
    """The searches of PORTFOLIO for one target height, each going on where it stopped
    (`planner.exact.resume`) from one round to the next."""

    def __init__(self, model: Model, height: int, deadline: float | None) -> None:
        self.runs = [
            (Resumable(kind(model, height, order, deadline=deadline)), divisor)
            for kind, order, divisor in PORTFOLIO
            # the skyline search cannot skip a block's sections without bytes
            if not (kind is SkylineSearch and model.gaps)
        ]

    def round(self, limit: int, budget: Budget) -> tuple[str, np.ndarray | None, int]:
        """Take each search on to its share of `limit` nodes in all (a search that ends within
        N nodes ends in the same round as when restarted under each round's limit).

        ("found", offsets), ("infeasible", None) or ("unknown", None), and how many ran.
        """
        tries = 0
        for run, divisor in self.runs:
            before = run.search.nodes
            nodes = budget.limit(max(1, limit // divisor) - before)
            if nodes <= 0 or budget.spent():
                break
            tries += 1
            try:
                ended = run.step(before + nodes)
            except BudgetSpent:
                continue
            finally:
                budget.nodes += run.search.nodes - before
            if ended:
                if run.offsets is None:
                    return "infeasible", None, tries
                return "found", run.offsets.copy(), tries
        return "unknown", None, tries

    def close(self) -> None:
        for run, _ in self.runs:
            run.close()


def _first_limit(model: Model) -> int:
    return max(64, 2 * len(model))


def decide(model: Model, target: int, budget: Budget) -> SearchResult:
    """A packing no higher than `target`, a proof that none exists, or "timeout"."""
    lower = model.lower_bound()
    if target < lower:
        return SearchResult("infeasible", lower)
    limit, restarts = _first_limit(model), 0
    portfolio = _Portfolio(model, target, budget.deadline)
    try:
        while not budget.spent():
            verdict, offsets, tries = portfolio.round(limit, budget)
            restarts += tries
            if verdict == "found":
                height = model.height(offsets)  # type: ignore[arg-type]
                status = "optimal" if height <= lower else "feasible"
                return SearchResult(status, lower, offsets, budget.nodes, restarts)
            if verdict == "infeasible":
                return SearchResult("infeasible", target + 1, nodes=budget.nodes, restarts=restarts)
            limit += limit // GROWTH
    finally:
        portfolio.close()
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
    portfolios: dict[int, _Portfolio] = {}  # by target height, while it is still asked for
    try:
        while best_height > lower and not budget.spent():
            for target in dict.fromkeys((lower, best_height - 1)):
                if target < lower or target >= best_height or budget.spent():
                    continue
                if target not in portfolios:
                    portfolios[target] = _Portfolio(model, target, budget.deadline)
                verdict, offsets, tries = portfolios[target].round(limit, budget)
                restarts += tries
                if verdict == "found" and offsets is not None:
                    best, best_height = offsets, model.height(offsets)
                elif verdict == "infeasible":
                    lower = max(lower, target + 1)
                for old in [t for t in portfolios if t < lower or t >= best_height]:
                    portfolios.pop(old).close()  # answered, or no longer worth asking
                if best_height <= lower:
                    break
            limit += limit // GROWTH
    finally:
        for portfolio in portfolios.values():
            portfolio.close()
    within = cap is None or best_height <= cap
    status = "optimal" if best_height <= lower else ("feasible" if within else "timeout")
    return SearchResult(status, lower, best, budget.nodes, restarts)
