"""Memory-aware ordering: a schedule of the same steps, respecting data dependencies, whose
peak of live bytes (LOAD) is as low as a time budget allows.

The order of the ops decides which tensors are alive together, so it bounds every plan
from below. The search:

1. Dependencies: a step depends on the step that writes each buffer it reads.
2. Greedy list scheduling: repeatedly run, among the steps whose inputs are ready, the one
   that raises the live bytes least while it runs (new outputs plus scratch), ties by the
   net bytes it leaves behind (outputs minus inputs it frees), then by original position.
3. Exact search (`planner.reorder_exact`, SERENITY's dynamic program over the frontier): the
   graph is cut into segments at the steps every order runs at the same point, and each
   segment's order of least peak is found, seeded by the greedy order's peak. Method
   "exact" for graphs of up to `exact_limit` steps; past it, "divided": segments of up to
   `exact_limit` steps are solved exactly, larger ones are left to step 4; "heuristic"
   when no segment is small enough.
4. Where the exact search runs out of budget, or is not tried: beams over the frontier and a
   local search (move a random step to a random position between its last producer and its
   first consumer; keep the move when LOAD does not grow; seeded), then the exact search
   again, seeded by what they found (`planner.reorder_search` shares out the time).
5. Return the best order seen; the model's own order when nothing beats it.

Finding the order of least peak memory is NP-hard: the exact search is bounded by seconds and
states, and `Reordered.proven` says whether the order returned is optimal. Never worse than
the order it was given.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from planner.errors import ProblemError
from planner.lifetimes import Schedule, Step
from planner.reorder_search import Budget, search
from planner.reorder_steps import StepGraph, positions

EXACT_LIMIT = 200  # steps: the exact search's graph (or segment) size limit
MAX_STATES = 400_000  # states one segment's exact search may hold (about 100 MB)
METHODS = ("exact", "divided", "heuristic")


@dataclass(frozen=True)
class Reordered:
    schedule: Schedule
    order: list[int]  # order[k] = index in the original schedule of the k-th step
    load_before: int
    load_after: int
    iterations: int  # local-search moves tried
    method: str = "heuristic"  # one of METHODS (see the module doc)
    proven: bool = False  # no dependency-respecting order has a lower LOAD
    bound: int = 0  # a lower bound on the least LOAD of any order
    segments: int = 1  # pieces the graph was cut into
    exact_segments: int = 0  # segments solved exactly
    budget_hit: bool = False  # the exact search ran out of seconds or states somewhere

    def summary(self) -> dict[str, object]:
        """The search's figures as JSON: method, proven, LOADs, bound, segments, and `describe()`."""
        return {
            "method": self.method,
            "proven": self.proven,
            "load_before": self.load_before,
            "load_after": self.load_after,
            "bound": self.bound,
            "segments": self.segments,
            "exact_segments": self.exact_segments,
            "budget_hit": self.budget_hit,
            "description": self.describe(),
        }

    def describe(self) -> str:
        """One line for people: the method, whether it is proven, the LOAD before and after."""
        verdict = "proven optimal" if self.proven else "not proven optimal"
        if self.budget_hit:
            verdict += " (the exact search hit its budget: best order found)"
        pieces = f", {self.exact_segments} of {self.segments} segments exact" if self.method == "divided" else ""
        return (
            f"reorder method {self.method}{pieces}: {verdict}; the searched schedule's LOAD {self.load_before:,} -> "
            f"{self.load_after:,} bytes"
        )


def reorder(
    schedule: Schedule,
    *,
    time_limit: float = 1.0,
    seed: int = 0,
    max_iterations: int | None = None,
    exact_limit: int = EXACT_LIMIT,
    max_states: int = MAX_STATES,
) -> Reordered:
    """The best dependency-respecting order found within the budget (see the module doc)."""
    if time_limit <= 0:
        raise ProblemError(f"time_limit must be > 0 seconds, got {time_limit}")
    if exact_limit < 0 or max_states < 1:
        raise ProblemError(f"exact_limit must be >= 0 and max_states >= 1, got {exact_limit} and {max_states}")
    started = time.perf_counter()
    g = StepGraph(schedule)
    identity = list(range(g.n))
    before = g.load(positions(identity))
    greedy = _greedy(schedule, g)
    if g.load(positions(greedy)) > before:
        greedy = identity
    # The search's shares of time are of what the greedy order left (a little, at least).
    now = time.perf_counter()
    left = max(time_limit - (now - started), 0.1 * time_limit)
    found = search(g, greedy, Budget(now, left, exact_limit, max_states, seed, max_iterations))
    order = found.order
    after = g.load(positions(order))
    if after >= before:  # equal: keep the model's own order
        order, after = identity, before
    steps = [schedule.steps[t] for t in order]
    result = Schedule(
        steps=steps,
        sizes=schedule.sizes,
        inputs=schedule.inputs,
        outputs=schedule.outputs,
        kinds=schedule.kinds,
        aliases=schedule.aliases,
        excluded=schedule.excluded,
    )
    return Reordered(
        result,
        order,
        before,
        after,
        found.iterations,
        method=found.method,
        proven=found.proven or after <= found.bound,
        bound=min(found.bound, after),
        segments=found.segments,
        exact_segments=found.exact_segments,
        budget_hit=found.budget_hit,
    )


def _greedy(schedule: Schedule, g: StepGraph) -> list[int]:
    """List scheduling by least growth of live bytes (step 2 of the module doc)."""
    steps: list[Step] = list(schedule.steps)
    index = {name: k for k, name in enumerate(g.names)}
    readers_left = (
        np.bincount(g.read_buf, minlength=len(g.names)) if g.read_buf.size else np.zeros(len(g.names), np.int64)
    )
    readers_left = readers_left.astype(np.int64)
    waiting = [len(p) for p in g.preds]
    ready = [(*_cost(steps[t], t, index, g, readers_left), t) for t in range(g.n) if waiting[t] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        *_, t = heapq.heappop(ready)
        order.append(t)
        for name in set(steps[t].reads):
            readers_left[index[name]] -= steps[t].reads.count(name)
        newly_ready = []
        for s in g.succs[t]:
            waiting[s] -= 1
            if waiting[s] == 0:
                newly_ready.append(s)
        # Costs depend on who is still waiting to read; refresh the ready set's keys.
        pending = [entry[-1] for entry in ready] + newly_ready
        ready = [(*_cost(steps[s], s, index, g, readers_left), s) for s in pending]
        heapq.heapify(ready)
    if len(order) != g.n:
        raise ProblemError("the schedule's dependencies form a cycle; no order can run it")
    return order


def _cost(step: Step, t: int, index: dict[str, int], g: StepGraph, readers_left: np.ndarray) -> tuple[int, int, int]:
    grow = sum(int(g.size[index[b]]) for b in step.writes) + sum(int(g.scratch_size[index[b]]) for b in step.scratch)
    freed = 0
    for name in set(step.reads):
        k = index[name]
        if readers_left[k] == step.reads.count(name) and not g.is_output[k]:
            freed += int(g.size[k])
    written = sum(int(g.size[index[b]]) for b in step.writes)
    return grow, written - freed, t
