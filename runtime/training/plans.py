"""The memory of a training step by ONE's categories: one arena per category, or one for all.

`training_problem(step)` is the step's planning problem, from the runtime's own lifetime
analysis (`runtime.memory_schedule`), with two training facts added: updated parameters and
optimizer state share the bytes of the tensors they replace (aliases), and kernel scratch is
the "disposable" category. `plan_categories` plans it twice with one strategy:

* per category: each category's buffers as a problem of their own, one arena each, as Samsung
  ONE's training runtime does (non-const, trainable, back-prop, gradient, optimizer, disposable, extra);
* unified: every buffer in one arena, lifetimes alone deciding what may share bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import planner
from planner import Plan, Problem, problem_from_schedule
from runtime.options import MemoryOptions
from runtime.problem import memory_schedule
from runtime.training.build import TrainingStep

# Planner kind -> ONE's category name, in the order ONE reports them.
CATEGORIES = {
    "activation": "non-const",
    "trainable": "trainable",
    "backprop": "back-prop",
    "gradient": "gradient",
    "optimizer": "optimizer variables",
    "disposable": "disposable",
    "extra": "extra",
}
_KIND_OF = {"input": "activation", "output": "activation", "workspace": "disposable"}


def training_problem(step: TrainingStep, options: MemoryOptions | None = None) -> Problem:
    """The step's planning problem; every buffer's kind is one of `CATEGORIES`.

    The step's data, parameters and state always live in the arena, with the default in-place
    aliases plus the step's own (updates written over what they replace): of `options` only
    ``workspace``, ``prepared_weights`` (the kernels' scratch depends on it) and ``alignment`` apply."""
    options = options or MemoryOptions()
    kernels = MemoryOptions(workspace=options.workspace, prepared_weights=options.prepared_weights)
    schedule = memory_schedule(step.graph, kernels)
    aliases = {**schedule.aliases, **{new: (old, 0) for new, old in step.in_place.items()}}
    kinds = {n: _KIND_OF.get(k, k) for n, k in schedule.kinds.items()}
    schedule = dataclasses.replace(schedule, aliases=aliases, kinds=kinds)
    return problem_from_schedule(schedule, alignment=options.alignment, name=step.graph.name)


@dataclass(frozen=True)
class CategoryPlans:
    """Both plans of one step; capacities in bytes."""

    problem: Problem
    per_category: dict[str, Plan]  # category -> the plan of its own arena
    unified: Plan

    @property
    def capacities(self) -> dict[str, int]:
        return {c: self.per_category[c].arena_bytes if c in self.per_category else 0 for c in CATEGORIES.values()}

    @property
    def per_category_total(self) -> int:
        return sum(self.capacities.values())

    @property
    def ratio(self) -> float:
        return self.unified.arena_bytes / self.per_category_total if self.per_category_total else 0.0

    def one_style(self) -> str:
        """The capacities as ONE's training runtime prints them, then the unified arena."""
        lines = [f"[ALLOC] allocation capacity: {n} # {c}" for c, n in self.capacities.items()]
        lines.append(f"[ALLOC] per-category total: {self.per_category_total} # sum of the arenas above")
        lines.append(
            f"[ALLOC] allocation capacity: {self.unified.arena_bytes} # unified ({self.ratio:.3f}x the per-category total)"
        )
        return "\n".join(lines)


def category_of(kind: str) -> str:
    return CATEGORIES[_KIND_OF.get(kind, kind)]


def plan_categories(problem: Problem, strategy: str = planner.DEFAULT_STRATEGY) -> CategoryPlans:
    """Plan `problem` (from `training_problem`) per category and unified, with the same strategy."""
    per: dict[str, Plan] = {}
    for kind, name in CATEGORIES.items():
        members = {b.id for b in problem.buffers if b.kind == kind}
        if not members:
            continue
        # An alias across categories (none arise from build_training_step) would dangle: drop it.
        buffers = tuple(
            b if b.alias_of is None or b.alias_of in members else dataclasses.replace(b, alias_of=None, alias_offset=0)
            for b in problem.buffers
            if b.id in members
        )
        per[name] = planner.plan(problem.replace(buffers=buffers, name=f"{problem.name}:{name}"), strategy)
    return CategoryPlans(problem, per, planner.plan(problem, strategy))
