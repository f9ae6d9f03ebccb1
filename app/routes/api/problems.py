"""/api/v1/problems: plan buffers from any runtime (Problem JSON or MiniMalloc CSV)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

import planner
from app.errors import AppError
from app.routes.deps import JobsDep, StorageDep
from app.schemas import PlansOut
from app.services import planning

router = APIRouter(tags=["problems"])


def _problem_schema() -> dict[str, Any]:
    """The Problem JSON Schema shipped with the planner, inlined so the OpenAPI document stands alone."""
    schema = json.loads((Path(planner.__file__).parent / "schema" / "problem.schema.json").read_text())
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id")}


_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": _problem_schema()},
            "text/csv": {"schema": {"type": "string", "description": "MiniMalloc CSV: id,lower,upper,size[,offset]"}},
        },
    }
}


@router.post("/problems/plan", response_model=PlansOut, openapi_extra=_BODY)
async def plan_problem(
    request: Request,
    storage: StorageDep,
    jobs: JobsDep,
    strategies: Annotated[str, Query(description="'all' or comma-separated names")] = "all",
    alignment: Annotated[int | None, Query(ge=1, description="override the problem's alignment (bytes)")] = None,
    capacity: Annotated[int | None, Query(ge=0, description="capacity of the first pool (bytes)")] = None,
    time_limit: Annotated[float | None, Query(gt=0, le=600)] = None,
    seed: int = 0,
    background: bool = False,
) -> dict[str, Any]:
    """Plan a Problem JSON or MiniMalloc CSV body; for runtimes that only have buffers."""
    limit = request.app.state.settings.max_problem_bytes
    too_large = AppError(
        413,
        f"the problem is larger than {limit:,} bytes, this service's limit (MEMPLAN_MAX_PROBLEM_BYTES); "
        "a MiniMalloc CSV of the same buffers is about a third of its Problem JSON",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large  # before reading any of it
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    problem = planning.parse_problem(bytes(body), request.headers.get("content-type", ""), alignment)
    return await run_in_threadpool(
        lambda: planning.plan_problem(
            storage,
            jobs,
            problem,
            strategies=strategies,
            capacity=capacity,
            time_limit=time_limit,
            seed=seed,
            background=background,
        )
    )


@router.get("/problems/{problem_id}")
def get_problem(problem_id: str, storage: StorageDep) -> dict[str, Any]:
    """The stored problem (Problem JSON), the options that made it, and its plans."""
    return planning.problem_document(storage, problem_id)
