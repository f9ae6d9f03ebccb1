"""/api/v1/plans: one plan in full, and its exports (MiniMalloc CSV, offline report, Netron)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse

from app import planning
from app.deps import PlanDep, StorageDep
from app.errors import AppError
from app.storage import PlanRecord, Storage
from planner import Problem

router = APIRouter(tags=["plans"])


# Stored problems never change: keep the last few parsed (20,000 buffers take 0.4 s to parse).
_PARSED: OrderedDict[str, tuple[Problem, dict[str, Any]]] = OrderedDict()
_PARSED_LOCK = threading.Lock()
PARSED_CACHE = 8


def problem_of(storage: Storage, record: PlanRecord) -> tuple[Problem, dict[str, Any]]:
    """The problem a plan was made for, and its stored record (options, tensor facts)."""
    with _PARSED_LOCK:
        if record.problem_id in _PARSED:
            _PARSED.move_to_end(record.problem_id)
            return _PARSED[record.problem_id]
    stored = storage.get_problem(record.problem_id)
    if stored is None:  # only if the database was edited by hand
        raise AppError(404, f"the problem of plan {record.id!r} is gone")
    parsed = (Problem.from_json(stored["problem"]), stored)
    with _PARSED_LOCK:
        _PARSED[record.problem_id] = parsed
        while len(_PARSED) > PARSED_CACHE:
            _PARSED.popitem(last=False)
    return parsed


def remember(storage: Storage, problem_id: str, problem: Problem) -> None:
    """Cache a problem just stored, already parsed: its plan page is usually opened next."""
    stored = storage.get_problem(problem_id)
    if stored is None:
        return
    with _PARSED_LOCK:
        _PARSED[problem_id] = (problem, stored)
        while len(_PARSED) > PARSED_CACHE:
            _PARSED.popitem(last=False)


def _needs_plan(record: PlanRecord) -> None:
    if not record.plan:
        raise AppError(
            409, f"strategy {record.strategy} produced no plan: {'; '.join(record.violations)}", title="No plan"
        )


@router.get("/plans/{plan_id}")
def get_plan(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """The Plan JSON (schema memplan.plan/1) with every buffer: id, name, size, first, last, kind, offset."""
    problem, stored = problem_of(storage, record)
    return planning.plan_document(record, problem, stored["model_id"])


@router.get("/plans/{plan_id}/export.csv", response_class=PlainTextResponse)
def export_csv(record: PlanDep, storage: StorageDep) -> PlainTextResponse:
    """MiniMalloc CSV (id,lower,upper,size,offset) of the plan."""
    _needs_plan(record)
    problem, _ = problem_of(storage, record)
    filename = f"{problem.name or 'plan'}-{record.strategy}.csv"
    return PlainTextResponse(
        planning.csv_export(record, problem),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/plans/{plan_id}/export.html", response_class=HTMLResponse)
def export_html(request: Request, record: PlanDep, storage: StorageDep) -> HTMLResponse:
    """A standalone report with plotly.js embedded: opens offline, from a file."""
    _needs_plan(record)
    from app.pages import report_html

    return HTMLResponse(report_html(request, storage, record))


@router.get("/plans/{plan_id}/netron.json")
def export_netron(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """Per-tensor metadata (offset, size, pool, lifetime, kind) to show next to a model's tensors."""
    _needs_plan(record)
    problem, stored = problem_of(storage, record)
    model = storage.get_model(stored["model_id"]) if stored["model_id"] else None
    return planning.netron_attachment(record, problem, model.name if model else problem.name)
