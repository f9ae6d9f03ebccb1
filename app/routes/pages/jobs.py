"""A job's page, and a run's page (the permalink of a finished run)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from app.errors import not_found
from app.routes.deps import JobsDep, StorageDep
from app.routes.rendering import render
from app.services.run_views import run_plan_view, running_plan_view

router = APIRouter(include_in_schema=False)


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, jobs: JobsDep) -> Response:
    job = jobs.get(job_id)
    if job is None:
        raise not_found("job", job_id)
    if job.kind == "run":
        return RedirectResponse(f"/runs/{job_id}", status_code=303)
    if job.kind == "training":
        return RedirectResponse(f"/training/demo/{job_id}", status_code=303)
    return render(request, "job.html", {"page_title": job.title, "job": job.to_json()})


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str, jobs: JobsDep, storage: StorageDep) -> Response:
    job = jobs.get(run_id)  # a run's id is its job's id
    if job is not None and job.kind == "run":
        data = {"job": job.to_json(), "result": job.result}
    else:  # a run whose job row is gone: the stored result
        stored = storage.get_run(run_id)
        if stored is None:
            raise not_found("run", run_id)
        data = {"job": None, "result": stored.result}
    data["view"] = run_plan_view(storage, data["result"])  # the plan it ran in, with the measured times
    if data["view"] is None and data["job"] is not None:  # under way: followed live on its plan
        data["view"] = running_plan_view(storage, data["job"])
    return render(request, "run.html", {"page_title": "run", "run_id": run_id, **data})
