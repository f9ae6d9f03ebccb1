"""/api/v1/pipelines: stored models run one after the other in one joint arena."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from app.routes.deps import JobsDep, PagingDep, StorageDep
from app.schemas import JobOut, PipelineRequest, PipelineRunRequest
from app.services import listings, pipelines

router = APIRouter(tags=["pipelines"])


@router.post("/pipelines", status_code=201)
async def create_pipeline(body: PipelineRequest, storage: StorageDep, jobs: JobsDep) -> dict[str, Any]:
    """Plan the models as one pipeline: the joint arena against the sum of the models' separate arenas.

    With `run: true` a run starts at once; its job is in `job`.
    """
    out = await run_in_threadpool(pipelines.plan_pipeline, storage, jobs, body)
    if body.run and out["valid"]:
        job = await run_in_threadpool(pipelines.start_run, storage, jobs, out["id"], PipelineRunRequest(seed=body.seed))
        out["job"] = job.to_json()
    return out


@router.get("/pipelines")
def list_pipelines(storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """Stored pipelines, newest first, paged (`items`, `total`, `limit`, `offset`, `next`)."""
    return listings.pipelines(storage, limit=paging.limit, offset=paging.offset)


@router.get("/pipelines/{pipeline_id}")
def get_pipeline(pipeline_id: str, storage: StorageDep) -> dict[str, Any]:
    return pipelines.describe(storage, pipeline_id)


@router.post("/pipelines/{pipeline_id}/runs", status_code=202, response_model=JobOut)
async def run_pipeline(
    pipeline_id: str, storage: StorageDep, jobs: JobsDep, body: PipelineRunRequest | None = None
) -> dict[str, Any]:
    """Run the pipeline in its joint plan as a job; the result counts copies like a model's run."""
    job = await run_in_threadpool(pipelines.start_run, storage, jobs, pipeline_id, body or PipelineRunRequest())
    return job.to_json()
