"""Training memory in the service: a stored model's training step planned by category and unified,
and the training demo as a job that streams its loss.

Both store the unified problem and its plan (without a model: a training plan is not a plan to run
the forward model in), so the plan page draws its offset chart, coloured by kind, which for a
training step is the category.
"""

from __future__ import annotations

from typing import Any

import runtime
from app.errors import AppError
from app.jobs import Job, JobContext, JobFailed, JobService
from app.schemas import TrainingDemoRequest, TrainingPlanRequest
from app.services import graphs, library
from app.services.library import check_dims
from app.services.planning import plan_and_store
from app.storage import ModelRecord, Storage
from planner import Problem, get
from runtime.training import (
    CATEGORIES,
    CategoryPlans,
    NonFiniteLossError,
    build_training_step,
    plan_categories,
    training_problem,
)

MAX_LOSS_EVENTS = 1000  # a longer demo reports every n-th step (the result keeps every loss)


def _fast(strategy: str) -> None:
    if get(strategy).slow:
        raise AppError(422, f"strategy: {strategy} runs as a job of its own; plan a training step with a fast one")


def plan_training(storage: Storage, jobs: JobService, record: ModelRecord, body: TrainingPlanRequest) -> dict[str, Any]:
    """Build the model's training step, plan it per category and unified, store the unified plan."""
    _fast(body.strategy)
    check_dims(record, body.dims)
    library.check_shapes(record, body.shapes)
    path = library.model_path(storage, record)
    try:
        step = build_training_step(
            path,
            body.trainable,
            loss=body.loss,
            optimizer=body.optimizer,
            dims=body.dims,
            shapes=body.shapes,
            recompute=body.recompute,
        )
        problem = training_problem(step, runtime.MemoryOptions(alignment=body.alignment))
    except runtime.ModelError as e:
        raise AppError(422, f"the model cannot be trained: {e}", title="Cannot train") from None
    plans = plan_categories(problem, body.strategy)
    stored = _store(storage, jobs, problem, body.strategy, f"{record.name} · training step", step.graph)
    options = body.model_dump()
    return {"model_id": record.id, "options": options, **breakdown(plans), **stored}


def _store(
    storage: Storage, jobs: JobService | None, problem: Problem, strategy: str, name: str, graph: Any
) -> dict[str, Any]:
    problem = problem.replace(name=name)
    made = plan_and_store(
        storage,
        jobs,
        problem,
        [strategy],
        strategy_options={"seed": 0},
        request_options={"training": True, "strategies": [strategy]},
        tensors=graphs.tensor_facts(graph, problem),
    )
    plan_id = made["plans"][0]["id"]
    return {"problem_id": made["problem_id"], "plan_id": plan_id, "links": {"plan": f"/plans/{plan_id}"}}


def breakdown(plans: CategoryPlans) -> dict[str, Any]:
    """Both plans by category: each category's own arena, and what of the unified arena each category
    holds at the step where the unified problem's live bytes peak (the rest is unused at that step)."""
    problem = plans.problem
    live = [dict.fromkeys(CATEGORIES, 0) for _ in range(problem.steps)]
    for b in problem.buffers:
        if b.alias_of is not None:  # shares its target's bytes: counted once, with the target
            continue
        for s in range(b.first, b.last + 1):
            live[s][b.kind] = live[s].get(b.kind, 0) + b.size
    totals = [sum(per.values()) for per in live]
    peak = max(range(len(totals)), key=lambda s: (totals[s], -s)) if totals else 0
    at_peak = live[peak] if live else dict.fromkeys(CATEGORIES, 0)
    unified = plans.unified.arena_bytes
    capacities = plans.capacities
    step_name = problem.step_names[peak] if problem.step_names and peak < len(problem.step_names) else None
    return {
        "strategy": plans.unified.strategy,
        "schedule_steps": problem.steps,
        "categories": [
            {
                "kind": kind,
                "category": name,
                "per_category_bytes": capacities[name],
                "unified_peak_bytes": at_peak[kind],
            }
            for kind, name in CATEGORIES.items()
        ],
        "capacities": capacities,
        "per_category_total": plans.per_category_total,
        "unified_bytes": unified,
        "ratio": round(plans.ratio, 6),
        "peak_step": peak,
        "peak_step_name": step_name,
        "unused_at_peak_bytes": max(0, unified - sum(at_peak.values())),
        "one_style": plans.one_style(),
    }


def start_demo(storage: Storage, jobs: JobService, body: TrainingDemoRequest) -> Job:
    """Submit the demo as a job (`demo_task`): one progress event per step with `step` and `loss`."""
    _fast(body.strategy)
    title = f"train the {body.model} demo for {body.steps} steps"
    return jobs.submit("training", title, demo_task, {"body": body.model_dump()}, links={"page": "/training/demo/{id}"})


def demo_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The training demo job, on a worker: train, store the unified plan, return losses and breakdown."""
    from runtime.training.demo import train_demo

    body = TrainingDemoRequest.model_validate(payload["body"])
    every = max(1, body.steps // MAX_LOSS_EVENTS)

    def on_step(i: int, loss: float) -> None:
        if i % every == 0 or i == body.steps - 1:
            job.report((i + 1) / body.steps, f"step {i + 1}/{body.steps}: loss {loss:.4f}", step=i, loss=loss)

    job.report(0.0, f"building the {body.model}'s training step and planning it")
    try:
        result = train_demo(
            body.model, body.steps, body.batch, body.optimizer, body.lr, body.strategy, body.seed, on_step
        )
    except (NonFiniteLossError, runtime.ModelError) as e:
        raise JobFailed(f"training stopped: {e}", 422) from None
    assert result.plans is not None
    name = f"{body.model} demo · training step"
    stored = _store(job.storage, None, result.plans.problem, body.strategy, name, None)  # fast: inline
    return {
        "demo": body.model_dump(),
        "source": result.source,
        "losses": result.losses,
        "first_loss": result.losses[0],
        "last_loss": result.losses[-1],
        "accuracy": result.accuracy,
        "steps": result.step_times,  # the last training step, node by node, on the unified plan's steps
        **breakdown(result.plans),
        **stored,
    }
