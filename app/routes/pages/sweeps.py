"""Sweeps: the form that starts one, and a sweep's page (live progress, table, heatmap)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.routes.deps import JobDep, JobsDep, StorageDep
from app.routes.rendering import render
from app.services import reports, sweeps
from app.services.library import model_out

router = APIRouter(include_in_schema=False)


@router.get("/sweeps")
def sweep_form(request: Request, storage: StorageDep) -> Response:
    """Pick stored models, strategies and dims (the form posts to /api/v1/sweeps)."""
    models = [model_out(r) for r in storage.list_models()]
    return render(
        request, "sweeps.html", {"page_title": "sweep", "models": models, "strategies": reports.strategy_list()}
    )


@router.get("/sweeps/{job_id}")
def sweep_page(request: Request, job: JobDep, jobs: JobsDep) -> Response:
    sweep = sweeps.report(jobs, job)
    return render(request, "sweep.html", {"page_title": job.title, "sweep": sweep})
