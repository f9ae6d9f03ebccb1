"""The training demo: its form, and one demo run's page."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.errors import AppError
from app.routes.deps import JobDep, StorageDep
from app.routes.rendering import render
from app.services import reports, training
from app.services.run_views import run_plan_view

router = APIRouter(include_in_schema=False)


@router.get("/training")
def training_page(request: Request) -> Response:
    """The training demo's form: an MLP or a small CNN learns 8x8 digits inside one arena."""
    fast = [s for s in reports.strategy_list() if not s["slow"]]
    context = {"page_title": "training demo", "job": None, "strategies": fast, "view": None}
    return render(request, "training.html", {**context, "memory": training.form_memory(None)})


@router.get("/training/demo/{job_id}")
def training_demo_page(request: Request, job: JobDep, storage: StorageDep) -> Response:
    """One demo run: the loss per step and the unified plan's chart, both followed live while it trains
    (a cursor on the executing node, its writes lit, node times, the canary's hit), then both plans by category."""
    if job.kind != "training":
        raise AppError(404, f"job {job.id!r} is a {job.kind} job, not a training demo; see /jobs/{job.id}")
    fast = [s for s in reports.strategy_list() if not s["slow"]]
    # The unified plan, with the last step's node times; under way, the plan it trains in, once stored.
    view = run_plan_view(storage, job.result) if job.result else training.planned_view(storage, job)
    context = {"page_title": "training demo", "job": job.to_json(), "strategies": fast, "view": view}
    context["memory"] = training.form_memory(job)  # the form shows the options this demo ran with
    return render(request, "training.html", context)
