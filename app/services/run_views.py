"""The plan chart of a run: the offset chart of the plan a run executes, with its measured time per
step drawn on the same step axis (static/live.js, ``Memplan.runPlan``), on a finished run's page,
on a run's page while it runs, and on a pipeline's page, whose runs are followed live there."""

from __future__ import annotations

from typing import Any

from app.services import chart_windows, charts, plan_heads, planning
from app.services.plans import problem_of
from app.storage import Storage


def plan_chart_view(storage: Storage, plan_id: str | None) -> dict[str, Any] | None:
    """The chart data of one stored plan, or None when there is nothing to draw (no plan id, the plan
    is gone or has no placements, or it is too big to draw whole: its plan page aggregates)."""
    head = storage.get_plan(plan_id, placements=False) if plan_id else None
    big = head is not None and plan_heads.stored(storage, head.problem_id)
    if head is None or (big and big.count > chart_windows.AGGREGATE_ABOVE):  # drawn whole, never: not parsed
        return None
    record = storage.get_plan(head.id)
    if record is None or not record.plan:
        return None
    problem, stored = problem_of(storage, record)
    if chart_windows.is_big(problem):
        return None
    offsets = {record.id: charts.offsets_of(problem, record.plan)}
    summaries = [planning.summary(record, problem)]
    view = charts.plan_view(problem, summaries, offsets, stored.tensors or {}, selected=record.id, compare=None)
    view["x_range"] = None
    view["query"] = ""
    return view


def run_plan_view(storage: Storage, result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chart data of the plan a finished run executed (None as `plan_chart_view` says)."""
    return plan_chart_view(storage, (result or {}).get("plan_id"))


def running_plan_view(storage: Storage, job: dict[str, Any]) -> dict[str, Any] | None:
    """The plan a run job under way executes (its ``plan`` link, /plans/{id}), to follow it live."""
    if job.get("state") not in ("queued", "running"):
        return None
    link = (job.get("links") or {}).get("plan", "")
    return plan_chart_view(storage, link.rsplit("/", 1)[-1] if link.startswith("/plans/") else None)
