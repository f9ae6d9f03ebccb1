"""The exact recomputation curve of a small training step: branch and bound over the choices, bounded by LOAD.

The objective is the arena the strategy places for each choice (not a formula of the choice: the
placement is the strategy's own), so neither an ILP nor a dynamic program over live bytes would be
exact for it; this search is, for every extra-FLOPs level at once:

1. Enumerate the *canonical* choices within the FLOPs allowed, by a depth-first walk over the
   candidates from the last made to the first: a tensor backward does not read is taken only when a
   producer of a tensor already taken reads it (else its copy would never be made: the same step as
   without it, for more FLOPs, so never better). FLOPs only grow as a choice grows, so a branch over
   the limit is cut with everything below it.
2. Visit them by extra FLOPs (then size, then names). Each one's problem is built and its LOAD (the
   most bytes live at one step) found without placing; when a choice already placed has at most its
   FLOPs and an arena at most that LOAD, it is skipped: its own arena is at least its LOAD, so it
   cannot lower the curve at any level. Otherwise it is placed.

Every choice within the limit is thus placed or proven no better, so the curve's arena at each level
is the smallest the strategy places for any choice within it (tests compare it with placing every
subset). What it saves is placements (on the steps tested, most of the choices); what it still pays
is one problem per canonical choice, which bounds its reach (`search` calls it up to
`exact_up_to` candidates, else falls back to the heuristic).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from runtime.training.remat import Candidate

EPS = 1e-12


class Scorer(Protocol):
    """What the search needs of `runtime.training.remat_search.Scorer` (which imports this module)."""

    @property
    def cands(self) -> Mapping[str, Candidate]: ...

    @property
    def kept(self) -> set[str]: ...

    @property
    def producer_inputs(self) -> Mapping[str, list[str]]: ...

    @property
    def points(self) -> Mapping[frozenset[str], Any]: ...

    def flops(self, chosen: Iterable[str]) -> float: ...

    def dominated(self, chosen: frozenset[str]) -> bool: ...

    def __call__(self, chosen: Iterable[str]) -> Any: ...


def canonical_choices(score: Scorer, overhead: float, deadline: float) -> Iterator[frozenset[str]]:
    """Every canonical choice (step 1) whose extra FLOPs fit `overhead`, the empty one included; stops
    early at `deadline`."""
    order = sorted(score.cands.values(), key=lambda c: (-c.position, c.name))
    inputs = score.producer_inputs

    def walk(i: int, chosen: frozenset[str], needed: frozenset[str]) -> Iterator[frozenset[str]]:
        if i == len(order):
            yield chosen
            return
        if time.perf_counter() >= deadline:
            return
        yield from walk(i + 1, chosen, needed)
        c = order[i]
        if c.name in score.kept or c.name in needed:
            more = chosen | {c.name}
            if score.flops(more) <= overhead + EPS:
                yield from walk(i + 1, more, needed | set(inputs[c.producer]))

    yield from walk(0, frozenset(), frozenset())


def exact_curve(score: Scorer, overhead: float, deadline: float) -> bool:
    """Place (into `score`) every canonical choice within `overhead` that could lower the curve (step 2);
    False when `deadline` stopped it first."""
    choices = []
    for choice in canonical_choices(score, overhead, deadline):
        choices.append(choice)
    if time.perf_counter() >= deadline:
        return False
    choices.sort(key=lambda s: (score.flops(s), len(s), sorted(s)))
    for choice in choices:
        if time.perf_counter() >= deadline:
            return False
        if choice not in score.points and not score.dominated(choice):
            score(choice)
    return True
