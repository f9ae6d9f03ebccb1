"""Training memory in the service: a stored model's training step planned by category and unified,
and the training demo as a job that streams its loss.

Both store the unified problem and its plan (without a model: a training plan is not a plan to run
the forward model in), so the plan page draws its offset chart, coloured by kind, which for a
training step is the category.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import runtime
from app.errors import AppError
from app.jobs import Job, JobContext, JobFailed, JobService
from app.schemas import TrainingDemoRequest, TrainingMemoryRequest, TrainingPlanRequest
from app.services import graphs, library
from app.services.library import check_dims
from app.services.planning import plan_and_store
from app.services.run_views import plan_chart_view
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
from runtime.training.remat_spec import parse_remat, rematerialized

if TYPE_CHECKING:
    from runtime.training.demo import NodeEvent

MAX_LOSS_EVENTS = 1000  # a longer demo reports every n-th step (the result keeps every loss)
MAX_NODE_EVENTS = 3000  # node events of a whole demo: every n-th training step is reported node by node
REFERENCE_RTOL = 1e-4  # the first loss against onnx.reference's, relative (float32 kernels, float64 oracle)
PLANNED_WITHIN = 10  # the plan's event is among a demo job's first events
REMAT_SECONDS = 10.0  # the recomputation search of a training plan answered in the request


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
            recompute=body.recompute and body.remat == "off",
        )
        found = rematerialized(
            step,
            parse_remat(body.remat),
            body.remat_overhead,
            strategy=body.strategy,
            options=body.memory(),
            time_limit=REMAT_SECONDS,
        )
        step = found.step if found is not None and found.step is not None else step
        problem = training_problem(step, body.memory())
    except runtime.ModelError as e:
        raise AppError(422, f"the model cannot be trained: {e}", title="Cannot train") from None
    plans = plan_categories(problem, body.strategy)
    name = f"{record.name} · training step"
    stored = _store(storage, jobs, problem, body.strategy, name, step.graph, body)
    options = body.model_dump()
    remat = {"remat": found.report()} if found is not None else {}
    return {"model_id": record.id, "options": options, **breakdown(plans), **stored, **remat}


def _store(
    storage: Storage,
    jobs: JobService | None,
    problem: Problem,
    strategy: str,
    name: str,
    graph: Any,
    memory: TrainingMemoryRequest,
) -> dict[str, Any]:
    """Store the problem and its plan; the stored options say it is a training step's, and its memory options."""
    problem = problem.replace(name=name)
    applied = memory.model_dump(include=set(TrainingMemoryRequest.model_fields))
    made = plan_and_store(
        storage,
        jobs,
        problem,
        [strategy],
        strategy_options={"seed": 0},
        request_options={"training": True, "strategies": [strategy], **applied},
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


def form_memory(job: Job | None) -> dict[str, Any]:
    """The memory options the training form shows: those the demo `job` ran with, else the defaults."""
    demo = (job.result or {}).get("demo", {}) if job is not None else {}
    given = {name: demo[name] for name in TrainingMemoryRequest.model_fields if name in demo}
    return TrainingMemoryRequest.model_validate(given).model_dump()


def demo_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The training demo job, on a worker: plan and store the unified plan first (the page draws it at
    once), then train, reporting every node of every n-th step (`DemoFollower`) and every loss;
    return losses, the verdict and the breakdown."""
    from runtime.training.demo import train_demo

    body = TrainingDemoRequest.model_validate(payload["body"])
    follower = DemoFollower(job, body)
    job.report(0.0, f"building the {body.model}'s training step and planning it")
    try:
        result = train_demo(
            body.model,
            body.steps,
            body.batch,
            body.optimizer,
            body.lr,
            body.strategy,
            body.seed,
            follower.on_step,
            on_plans=follower.on_plans,
            on_node=follower.on_node,
            canary=body.canary,
            options=body.memory(),
            remat=body.remat,
            remat_overhead=body.remat_overhead,
        )
    except runtime.CanaryError as e:
        follower.flush()  # the page's cursor ends on the step that corrupted
        raise JobFailed(f"training stopped: {e}", 422, canary=canary_hit(e)) from None
    except (NonFiniteLossError, runtime.ModelError) as e:
        raise JobFailed(f"training stopped: {e}", 422) from None
    assert result.plans is not None and follower.stored
    return {
        "demo": body.model_dump(),
        "source": result.source,
        "losses": result.losses,
        "first_loss": result.losses[0],
        "last_loss": result.losses[-1],
        "accuracy": result.accuracy,
        "steps": result.step_times,  # the last training step, node by node, on the unified plan's steps
        "arena_bytes": result.plans.unified.arena_bytes,
        "seconds": result.seconds,  # every training step, planning and checks left out
        "canary": body.canary,  # every node of every step checked, no hit: a hit fails the job at its step
        "verdict": verdict(result.losses, result.reference_loss),
        **({"remat": result.remat} if result.remat is not None else {}),
        **breakdown(result.plans),
        **follower.stored,
    }


class DemoFollower:
    """The demo's hooks as job events: the stored plan's id once planned, then each node of every
    n-th training step (`step` on the plan's step axis, `seconds`, `writes`; at most about
    `MAX_NODE_EVENTS` in all, one write per step), and each loss (`train_step`, `loss`)."""

    def __init__(self, job: JobContext, body: TrainingDemoRequest) -> None:
        self.job, self.body = job, body
        self.stored: dict[str, Any] = {}
        self.every_loss = max(1, body.steps // MAX_LOSS_EVENTS)
        self.every_node = 1
        self.pending: list[tuple[float | None, str | None, dict[str, Any]]] = []

    def on_plans(self, plans: CategoryPlans) -> None:
        name = f"{self.body.model} demo · training step"
        self.stored = _store(self.job.storage, None, plans.problem, self.body.strategy, name, None, self.body)  # inline
        self.every_node = max(1, -(-self.body.steps * plans.problem.steps // MAX_NODE_EVENTS))
        self.job.report(0.0, "planned: training", plan_id=self.stored["plan_id"], problem_id=self.stored["problem_id"])

    def on_node(self, event: NodeEvent) -> None:
        last = self.body.steps - 1
        if event.train_step % self.every_node and event.train_step != last:
            return
        progress = (event.train_step + (event.index + 1) / event.total) / self.body.steps
        data = {
            "train_step": event.train_step,
            "step": event.index,
            "op": event.name,
            "seconds": event.seconds,
            "writes": list(event.writes),
        }
        message = f"step {event.train_step + 1}/{self.body.steps}: {event.name} ({event.op_type})"
        self.pending.append((progress, message, data))
        if event.index == event.total - 1:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.job.report_many(self.pending)
            self.pending = []

    def on_step(self, i: int, loss: float) -> None:
        if i % self.every_loss == 0 or i == self.body.steps - 1:
            message = f"step {i + 1}/{self.body.steps}: loss {loss:.4f}"
            self.job.report((i + 1) / self.body.steps, message, train_step=i, loss=loss)


def canary_hit(e: runtime.CanaryError) -> dict[str, Any]:
    """Where the canary caught a node writing over a live tensor, as the page draws it."""
    tensors = [
        {"name": name, "first_byte": lo, "end": hi, "bytes": count}
        for name, (lo, hi, count) in sorted(e.clobbered.items())
    ]
    return {"step": e.step, "node": e.node, "tensors": tensors}


def verdict(losses: list[float], reference: float | None) -> dict[str, Any]:
    """The demo's checks: the first step's loss in the arena against onnx.reference's loss of the
    initial weights on the same batch (the oracle), and the loss falling (every loss is finite, or
    the job stopped at the first that was not)."""
    first = losses[0]
    matches = reference is not None and abs(first - reference) <= REFERENCE_RTOL * max(1.0, abs(reference))
    k = max(1, min(5, len(losses) // 2))
    fell = None if len(losses) < 2 else sum(losses[-k:]) / k < sum(losses[:k]) / k
    passed = matches and fell is not False
    ref = f"{reference:.5f}" if reference is not None else "none"
    said = f"first loss {first:.5f} against onnx.reference's {ref}"
    said += "" if fell is None else f"; loss {'fell' if fell else 'did not fall'}: {first:.4f} → {losses[-1]:.4f}"
    return {
        "oracle": "onnx.reference",
        "passed": passed,
        "reference_loss": reference,
        "loss_fell": fell,
        "summary": ("checked: " if passed else "check failed: ") + said,
    }


def planned_view(storage: Storage, job: Job) -> dict[str, Any] | None:
    """The unified plan a demo job stored before training (its first events say which), to follow the
    job live on its chart, or to show where the canary stopped it; None before it is planned or when
    the job is over otherwise."""
    stopped = job.state == "failed" and bool((job.error or {}).get("canary"))
    if job.state not in ("queued", "running") and not stopped:
        return None
    for event in storage.job_events(job.id, limit=PLANNED_WITHIN):
        plan_id = event["data"].get("plan_id")
        if plan_id:
            return plan_chart_view(storage, plan_id)
    return None
