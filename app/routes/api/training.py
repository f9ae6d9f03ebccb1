"""/api/v1 training memory: a stored model's training step by category, and the training demo."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from app.routes.deps import JobsDep, ModelDep, StorageDep
from app.schemas import JobOut, TrainingDemoRequest, TrainingPlanRequest
from app.services import training

router = APIRouter(tags=["training"])


@router.post("/models/{model_id}/training-plans", status_code=201)
async def create_training_plan(
    record: ModelDep, body: TrainingPlanRequest, storage: StorageDep, jobs: JobsDep
) -> dict[str, Any]:
    """Plan one training step (forward, loss, backward, update) of the model per ONE category and unified.

    Returns each category's capacity, the unified arena, and the stored unified plan (`plan_id`) whose
    page draws the offset chart coloured by category.
    """
    return await run_in_threadpool(training.plan_training, storage, jobs, record, body)


@router.post("/training/demo", status_code=202, response_model=JobOut)
async def start_training_demo(
    storage: StorageDep, jobs: JobsDep, body: TrainingDemoRequest | None = None
) -> dict[str, Any]:
    """Train the demo MLP or small CNN on 8x8 digits inside one arena; the job's progress events carry
    `step` and `loss`, its result every loss, the accuracy and both plans by category."""
    job = await run_in_threadpool(training.start_demo, storage, jobs, body or TrainingDemoRequest())
    return job.to_json()
