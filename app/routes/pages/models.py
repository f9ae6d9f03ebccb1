"""A model's page: its summary, tensors by kind, parameter sharing, and the planning form."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.routes.deps import ModelDep, StorageDep
from app.routes.rendering import render
from app.services import reports

router = APIRouter(include_in_schema=False)


@router.get("/models/{model_id}")
async def model_page(request: Request, record: ModelDep, storage: StorageDep) -> Response:
    return render(request, "model.html", await run_in_threadpool(reports.model_page_context, storage, record))
