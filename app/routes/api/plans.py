"""/api/v1/plans: one plan in full, and its exports (MiniMalloc CSV, offline report, Netron)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, PlainTextResponse

from app.routes.deps import PlanDep, StorageDep, TemplatesDep
from app.services import diffs, notes, plans, reports

router = APIRouter(tags=["plans"])


@router.get("/plans/{plan_id}")
def get_plan(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """The Plan JSON (schema memplan.plan/1) with every buffer: id, name, size, first, last, kind, offset;
    and the reviewers' `notes` on it."""
    problem, stored = plans.problem_of(storage, record)
    return {**plans.plan_document(record, problem, stored["model_id"]), "notes": notes.listing(storage, record)}


@router.get("/plans/{a}/diff/{b}")
def diff_plans(a: str, b: str, storage: StorageDep) -> dict[str, Any]:
    """Two plans compared: arena, LOAD and peak step of each (`a`, `b`), `delta_bytes` (b - a), the tensors
    `only_in_a` and `only_in_b`, and the largest per-tensor size changes (`changed`: name, bytes_a, bytes_b)."""
    first, second = diffs.plan_pair(storage, a, b)
    return diffs.plan_diff(storage, first, second)


@router.get("/plans/{plan_id}/export.csv", response_class=PlainTextResponse)
def export_csv(record: PlanDep, storage: StorageDep) -> PlainTextResponse:
    """MiniMalloc CSV (id,lower,upper,size,offset) of the plan."""
    plans.needs_plan(record)
    problem, _ = plans.problem_of(storage, record)
    filename = f"{problem.name or 'plan'}-{record.strategy}.csv"
    return PlainTextResponse(
        plans.csv_export(record, problem),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/plans/{plan_id}/tensors.csv", response_class=PlainTextResponse)
def export_tensors(record: PlanDep, storage: StorageDep) -> PlainTextResponse:
    """Every tensor with kind, shape, dtype, bytes, lifetime, offset, pool, producer and consumers (CSV)."""
    plans.needs_plan(record)
    problem, stored = plans.problem_of(storage, record)
    filename = f"{problem.name or 'plan'}-{record.strategy}-tensors.csv"
    return PlainTextResponse(
        plans.tensors_csv(record, problem, stored["tensors"] or {}),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/plans/{plan_id}/export.html", response_class=HTMLResponse)
def export_html(record: PlanDep, storage: StorageDep, templates: TemplatesDep) -> HTMLResponse:
    """A standalone report with plotly.js embedded: opens offline, from a file."""
    plans.needs_plan(record)
    return HTMLResponse(reports.report_html(templates.env, storage, record))


@router.get("/plans/{plan_id}/netron.json")
def export_netron(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """Per-tensor metadata (offset, size, pool, lifetime, kind) to show next to a model's tensors."""
    plans.needs_plan(record)
    problem, stored = plans.problem_of(storage, record)
    model = storage.get_model(stored["model_id"]) if stored["model_id"] else None
    return plans.netron_attachment(record, problem, model.name if model else problem.name)
