"""/api/v1/plans: one plan in full, and its exports (MiniMalloc CSV, offline report, Netron, .tflite)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from app.routes.deps import PagingDep, PlanDep, StorageDep, TemplatesDep
from app.services import chart_windows, diffs, listings, notes, plans, reports, tflite_export

router = APIRouter(tags=["plans"])


@router.get("/plans")
def list_plans(storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """Every stored plan, newest first, paged (`items`, `total`, `limit`, `offset`, `next`): strategy,
    arena, LOAD, validity, its model and the dims and shapes it was planned at."""
    return listings.plans(storage, limit=paging.limit, offset=paging.offset)


@router.get("/plans/{plan_id}")
def get_plan(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """The Plan JSON (schema memplan.plan/1) with every buffer: id, name, size, first, last, kind, offset;
    and the reviewers' `notes` on it."""
    problem, stored = plans.problem_of(storage, record)
    return {**plans.plan_document(record, problem, stored.model_id), "notes": notes.listing(storage, record)}


@router.get("/plans/{a}/diff/{b}")
def diff_plans(a: str, b: str, storage: StorageDep) -> dict[str, Any]:
    """Two plans compared: arena, LOAD and peak step of each (`a`, `b`), `delta_bytes` (b - a), the tensors
    `only_in_a` and `only_in_b`, and the largest per-tensor size changes (`changed`: name, bytes_a, bytes_b)."""
    first, second = diffs.plan_pair(storage, a, b)
    return diffs.plan_diff(storage, first, second)


@router.get("/plans/{plan_id}/chart")
def chart_window(
    plan_id: str,
    storage: StorageDep,
    x0: Annotated[float | None, Query(description="first step of the window (default 0)")] = None,
    x1: Annotated[float | None, Query(description="step where the window ends (default: the last step + 1)")] = None,
    y0: Annotated[float | None, Query(description="lowest byte of the window (default 0)")] = None,
    y1: Annotated[float | None, Query(description="byte where the window ends (default: the arena + 5%)")] = None,
    limit: Annotated[
        int, Query(alias="max", ge=1, le=chart_windows.MAX_WINDOW_RECTS, description="most rectangles to return")
    ] = chart_windows.WINDOW_RECTS,
) -> dict[str, Any]:
    """The offset chart's rectangles meeting a window of steps x bytes, at most `max`, largest first
    (`rects`: index, id, first, last, size, offset, kind), `total` in the window, `truncated`, and
    when truncated an occupancy `raster` of the rest. What a big plan's page fetches as it zooms."""
    return chart_windows.plan_window(storage, plan_id, x0, x1, y0, y1, limit)


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
        plans.tensors_csv(record, problem, stored.tensors or {}),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/plans/{plan_id}/export.html", response_class=HTMLResponse)
def export_html(record: PlanDep, storage: StorageDep, templates: TemplatesDep) -> HTMLResponse:
    """A standalone report with plotly.js embedded: opens offline, from a file."""
    plans.needs_plan(record)
    return HTMLResponse(reports.report_html(templates.env, storage, record))


@router.get(
    "/plans/{plan_id}/export.tflite",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the .tflite model with the plan"}},
)
def export_tflite(record: PlanDep, storage: StorageDep) -> Response:
    """The plan's .tflite model with the plan as TensorFlow Lite Micro's offline plan (`OfflineMemoryAllocation`
    metadata). Headers: `X-Memplan-Offline` (tensors placed by the plan), `X-Memplan-Head` (their highest end)
    and `X-Memplan-Left-Out` (JSON: tensor -> why TensorFlow Lite Micro's own planner places it). 409 for a
    plan of an ONNX model or a problem, or of a reordered model."""
    exported, filename = tflite_export.export_stored(storage, record)
    return Response(
        exported.data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{tflite_export.ascii_name(filename)}"',
            "X-Memplan-Offline": str(len(exported.offsets)),
            "X-Memplan-Head": str(exported.head),
            "X-Memplan-Left-Out": json.dumps(exported.online),
        },
    )


@router.get("/plans/{plan_id}/netron.json")
def export_netron(record: PlanDep, storage: StorageDep) -> dict[str, Any]:
    """Per-tensor metadata (offset, size, pool, lifetime, kind) to show next to a model's tensors."""
    plans.needs_plan(record)
    problem, stored = plans.problem_of(storage, record)
    model = storage.get_model(stored.model_id) if stored.model_id else None
    return plans.netron_attachment(record, problem, model.name if model else problem.name)
