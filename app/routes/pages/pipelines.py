"""Pipelines: the form that connects stored models, and a pipeline's page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.routes.deps import StorageDep
from app.routes.rendering import render
from app.services import listings, pipelines, reports
from app.services.library import model_out
from app.services.run_views import plan_chart_view

router = APIRouter(include_in_schema=False)


@router.get("/pipelines")
def pipeline_form(request: Request, storage: StorageDep, offset: Annotated[int, Query(ge=0)] = 0) -> Response:
    """Pick stored models and connect them into a pipeline (the form posts to /api/v1/pipelines); below,
    the pipelines planned so far, newest first (paged by `offset`)."""
    models = [model_out(r) for r in storage.list_models()]
    fast = [s for s in reports.strategy_list() if not s["slow"]]
    listed = listings.pipelines(storage, offset=offset)
    context = {"page_title": "pipeline", "models": models, "strategies": fast, "listed": listed}
    return render(request, "pipelines.html", context)


@router.get("/pipelines/{pipeline_id}")
async def pipeline_page(request: Request, pipeline_id: str, storage: StorageDep) -> Response:
    """The joint arena against the models' separate arenas, the joint plan's chart, and a run button
    whose runs are followed live on that chart."""
    info = await run_in_threadpool(pipelines.describe, storage, pipeline_id)
    view = await run_in_threadpool(plan_chart_view, storage, info["plan_id"])
    context = {"page_title": f"pipeline {info['name']}", "pipeline": info, "view": view}
    return render(request, "pipeline.html", context)
