"""/api/v1/problems: plan buffers from any runtime (Problem JSON or MiniMalloc CSV)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

import planner
from app.deps import JobsDep, StorageDep
from app.errors import AppError, not_found
from app.planning import plan_and_store, summary
from app.schemas import PlansOut
from planner import Problem, ProblemError, names
from planner.compare import resolve_names
from planner.csvio import read_csv

router = APIRouter(tags=["problems"])

MAX_PROBLEM_BYTES = 64 * 1024 * 1024


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


def parse_problem(body: bytes, content_type: str, alignment: int | None) -> Problem:
    """A Problem from a JSON or CSV body; the content type decides, else the first byte."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AppError(
            415, f"the body is not UTF-8 text (byte {e.start}); send a Problem JSON or a MiniMalloc CSV"
        ) from None
    if not text.strip():
        raise AppError(422, "the body is empty; send a Problem JSON (application/json) or a MiniMalloc CSV (text/csv)")
    is_json = "json" in content_type or ("csv" not in content_type and text.lstrip().startswith("{"))
    if is_json:
        problem = Problem.loads(text)
    else:
        problem, _ = read_csv(text, source="body")
        problem = problem.replace(name=None)
    if alignment is not None:
        problem = problem.replace(alignment=alignment)
    return problem


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
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_PROBLEM_BYTES:
            raise AppError(413, f"the problem is larger than {MAX_PROBLEM_BYTES:,} bytes")
    problem = parse_problem(bytes(body), request.headers.get("content-type", ""), alignment)
    if capacity is not None:
        problem = problem.with_capacity(capacity)
    chosen = resolve_names(strategies)
    if not chosen:
        raise ProblemError(f"strategies: give at least one of {', '.join(names())} or 'all'")
    options: dict[str, Any] = {"seed": seed}
    if time_limit is not None:
        options["time_limit"] = time_limit
    request_options = {
        "strategies": chosen,
        "alignment": problem.alignment,
        "capacity": capacity,
        "seed": seed,
        "time_limit": time_limit,
    }
    return await run_in_threadpool(
        lambda: plan_and_store(
            storage,
            jobs,
            problem,
            chosen,
            strategy_options=options,
            request_options=request_options,
            background=background,
        )
    )


@router.get("/problems/{problem_id}")
def get_problem(problem_id: str, storage: StorageDep) -> dict[str, Any]:
    """The stored problem (Problem JSON), the options that made it, and its plans."""
    stored = storage.get_problem(problem_id)
    if stored is None:
        raise not_found("problem", problem_id)
    problem = Problem.from_json(stored["problem"])
    return {
        "id": problem_id,
        "model_id": stored["model_id"],
        "options": stored["options"],
        "problem": stored["problem"],
        "plans": [summary(r, problem) for r in storage.plans_of(problem_id)],
    }
