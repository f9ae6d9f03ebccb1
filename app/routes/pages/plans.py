"""A plan's page: strategy comparison, live bytes with the peak, and two offset charts side by side."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.routes.deps import PlanHeadDep, StorageDep
from app.routes.rendering import head_first, render, wants_json
from app.services import diffs, listings, reports

router = APIRouter(include_in_schema=False)


@router.get("/plans")
def plans_list(request: Request, storage: StorageDep, offset: Annotated[int, Query(ge=0)] = 0) -> Response:
    """Every stored plan, newest first (paged by `offset`), with its model and the shapes it was planned at."""
    listed = listings.plans(storage, offset=offset)
    return render(request, "plans.html", {"page_title": "plans", "listed": listed})


@router.get("/plans/{plan_id}")
async def plan_page(
    request: Request,
    record: PlanHeadDep,  # its Plan JSON is read once, with its siblings'
    storage: StorageDep,
    compare: str | None = None,
    x0: Annotated[float | None, Query()] = None,
    x1: Annotated[float | None, Query()] = None,
    q: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Strategy comparison, live bytes with the peak, and two offset charts side by side.

    ``compare`` (plan id or strategy), ``x0``/``x1`` (step range) and ``q`` (tensor search)
    reopen exactly the same view.
    """
    if wants_json(request):
        return render(
            request,
            "plan.html",
            await run_in_threadpool(reports.plan_page_context, storage, record, compare, x0, x1, q),
        )
    title = await run_in_threadpool(reports.plan_title, storage, record, compare)
    build = partial(reports.plan_page_context, storage, record, compare, x0, x1, q)
    return StreamingResponse(head_first(request, "plan.html", title, build), media_type="text/html; charset=utf-8")


@router.get("/plans/{a}/diff/{b}")
async def diff_page(
    request: Request,
    a: str,
    b: str,
    storage: StorageDep,
    x0: Annotated[float | None, Query()] = None,
    x1: Annotated[float | None, Query()] = None,
) -> Response:
    """Two plans side by side with synchronised axes, and the figures of `GET /api/v1/plans/{a}/diff/{b}`.

    ``x0``/``x1`` (step range) reopen the same view.
    """
    first, second = diffs.plan_pair(storage, a, b)
    return render(
        request, "diff.html", await run_in_threadpool(diffs.diff_page_context, storage, first, second, x0, x1)
    )
