"""/api/v1/sweeps: every stored model x strategy x dims combination planned over the workers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from app.routes.deps import JobDep, JobsDep, PagingDep, SettingsDep, StorageDep
from app.schemas import SweepRequest
from app.services import listings, sweeps

router = APIRouter(tags=["sweeps"])


@router.post("/sweeps", status_code=202)
async def create_sweep(body: SweepRequest, storage: StorageDep, jobs: JobsDep, settings: SettingsDep) -> dict[str, Any]:
    """Start a sweep (a job): `models` (stored model ids), `strategies`, `dims` (a list of dims mappings),
    optionally `shapes` (whole input shapes, held at every point).

    Unknown models or strategies and dims that do not bind are refused (422) before any task is
    submitted; more than `max_sweep_tasks` tasks, or a full job queue, is 429.
    """
    job = await run_in_threadpool(
        lambda: sweeps.start(
            storage,
            jobs,
            model_ids=list(dict.fromkeys(body.models)),
            strategies=body.names(),
            grid=body.dims,
            shapes=body.shapes,
            memory=body.memory(),
            max_tasks=settings.max_sweep_tasks,
        )
    )
    return sweeps.describe(job, [])


@router.get("/sweeps")
def list_sweeps(storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """Sweeps, newest first, paged (`items`, `total`, `limit`, `offset`, `next`): title, state, progress."""
    return listings.sweeps(storage, limit=paging.limit, offset=paging.offset)


@router.get("/sweeps/{job_id}")
def get_sweep(job: JobDep, jobs: JobsDep) -> dict[str, Any]:
    """`state`, `progress` and `results`: one row per model x strategy x dims with `model`, `strategy`,
    `dims`, `arena_bytes`, `lower_bound`, `valid`, `seconds` (the rows so far while it runs)."""
    return sweeps.report(jobs, job)


@router.get("/sweeps/{job_id}/results.csv", response_class=PlainTextResponse)
def sweep_csv(job: JobDep, jobs: JobsDep) -> PlainTextResponse:
    rows = sweeps.report(jobs, job)["results"]
    return PlainTextResponse(
        sweeps.to_csv(rows),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="sweep-{job.id}.csv"'},
    )
