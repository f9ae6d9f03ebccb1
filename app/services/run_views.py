"""The run page's plan chart: the offset chart of the plan a run executed, with the run's
measured time per step drawn on the same step axis (static/live.js, ``Memplan.runPlan``)."""

from __future__ import annotations

from typing import Any

from app.services import chart_windows, charts, planning
from app.services.plans import problem_of
from app.storage import Storage


def run_plan_view(storage: Storage, result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The chart data of the plan a finished run executed, or None when there is nothing to draw
    (no result yet, the plan is gone, or it is too big to draw whole: its plan page aggregates)."""
    plan_id = (result or {}).get("plan_id")
    record = storage.get_plan(plan_id) if plan_id else None
    if record is None or not record.plan:
        return None
    problem, stored = problem_of(storage, record)
    if chart_windows.is_big(problem):
        return None
    offsets = {record.id: charts.offsets_of(problem, record.plan)}
    summaries = [planning.summary(record, problem)]
    view = charts.plan_view(problem, summaries, offsets, stored["tensors"], selected=record.id, compare=None)
    view["x_range"] = None
    view["query"] = ""
    return view
