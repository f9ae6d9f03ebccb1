"""A model's page: its summary, tensors by kind, parameter sharing, and the planning form."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from app.routes.deps import ModelDep, StorageDep
from app.routes.rendering import render
from app.services import reports
from app.services.listings import earlier_work

router = APIRouter(include_in_schema=False)


@router.get("/models/{model_id}")
async def model_page(
    request: Request,
    record: ModelDep,
    storage: StorageDep,
    plans_offset: Annotated[int, Query(ge=0)] = 0,
    runs_offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """The model's summary and forms, and its earlier plans and runs (newest first, paged by the offsets)."""
    context = await run_in_threadpool(reports.model_page_context, storage, record)
    context["earlier"] = await run_in_threadpool(
        earlier_work, storage, record.id, plans_offset=plans_offset, runs_offset=runs_offset
    )
    return render(request, "model.html", context)
