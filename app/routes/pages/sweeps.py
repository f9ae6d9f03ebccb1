"""Sweeps: the form that starts one, and a sweep's page (live progress, table, heatmap)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.routes.deps import JobDep, JobsDep, StorageDep
from app.routes.rendering import render
from app.services import listings, reports, sweeps
from app.services.library import model_out

router = APIRouter(include_in_schema=False)


@router.get("/sweeps")
def sweep_form(request: Request, storage: StorageDep, offset: Annotated[int, Query(ge=0)] = 0) -> Response:
    """Pick stored models, strategies and dims (the form posts to /api/v1/sweeps); below, the sweeps so
    far, newest first (paged by `offset`)."""
    models = [model_out(r) for r in storage.list_models()]
    listed = listings.sweeps(storage, offset=offset)
    context = {"page_title": "sweep", "models": models, "strategies": reports.strategy_list(), "listed": listed}
    return render(request, "sweeps.html", context)


@router.get("/sweeps/{job_id}")
def sweep_page(request: Request, job: JobDep, jobs: JobsDep) -> Response:
    sweep = sweeps.report(jobs, job)
    return render(request, "sweep.html", {"page_title": job.title, "sweep": sweep})
