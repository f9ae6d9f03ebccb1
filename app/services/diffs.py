"""Two plans compared for a design review: two strategies, two option sets, two models, or two
versions of one model.

The figures: each plan's arena, LOAD and peak step (with the op there), the difference in
bytes and percent, the tensors only one of them has, and the largest per-tensor size changes
where names match. Tensors are matched by name (a model's tensor names; a bare problem's ids).
"""

from __future__ import annotations

from typing import Any

from app.errors import AppError
from app.services import charts
from app.services.library import model_out
from app.services.plans import problem_of
from app.storage import PlanRecord, ProblemRecord, Storage
from planner import Problem, peak_step

CHANGED_ROWS = 50  # the largest changes listed; `changed_count` says how many there are
MOVED_ROWS = 100  # the largest moved tensors listed; `moved_count` says how many there are


def plan_pair(storage: Storage, a: str, b: str) -> tuple[PlanRecord, PlanRecord]:
    """Both plans, or 404 naming the one that does not exist."""
    records = {}
    for side, plan_id in (("a", a), ("b", b)):
        record = storage.get_plan(plan_id)
        if record is None:
            raise AppError(
                404, f"{side}: no plan with id {plan_id!r}; a diff compares two stored plans", title="Unknown plan"
            )
        records[side] = record
    return records["a"], records["b"]


def plan_diff(storage: Storage, a: PlanRecord, b: PlanRecord) -> dict[str, Any]:
    """GET /api/v1/plans/{a}/diff/{b}: the figures a reviewer reads first."""
    problem_a, stored_a = problem_of(storage, a)
    problem_b, stored_b = problem_of(storage, b)
    sizes_a, sizes_b = _sizes(problem_a), _sizes(problem_b)
    changed = sorted(
        (
            {"name": name, "bytes_a": sizes_a[name], "bytes_b": sizes_b[name], "delta": sizes_b[name] - sizes_a[name]}
            for name in sizes_a.keys() & sizes_b.keys()
            if sizes_a[name] != sizes_b[name]
        ),
        key=_largest_change_first,
    )
    moved = _moved(problem_a, a, problem_b, b)
    side_a = _side(storage, a, problem_a, stored_a)
    side_b = _side(storage, b, problem_b, stored_b)
    delta = (
        side_b["arena_bytes"] - side_a["arena_bytes"]
        if side_a["arena_bytes"] is not None and side_b["arena_bytes"] is not None
        else None
    )
    return {
        "a": side_a,
        "b": side_b,
        "same_problem": a.problem_id == b.problem_id,
        "delta_bytes": delta,
        "delta_percent": round(100 * delta / side_a["arena_bytes"], 4)
        if delta is not None and side_a["arena_bytes"]
        else None,
        "delta_lower_bound": side_b["lower_bound"] - side_a["lower_bound"],
        "only_in_a": sorted(sizes_a.keys() - sizes_b.keys()),
        "only_in_b": sorted(sizes_b.keys() - sizes_a.keys()),
        "changed": changed[:CHANGED_ROWS],
        "changed_count": len(changed),
        "moved": moved[:MOVED_ROWS],
        "moved_count": len(moved),
        "links": {
            "self": f"/api/v1/plans/{a.id}/diff/{b.id}",
            "page": f"/plans/{a.id}/diff/{b.id}",
            "swap": f"/plans/{b.id}/diff/{a.id}",
        },
    }


def diff_page_context(
    storage: Storage, a: PlanRecord, b: PlanRecord, x0: float | None, x1: float | None
) -> dict[str, Any]:
    """The diff page: the figures, and each plan's chart data (its own problem, its one plan)."""
    diff = plan_diff(storage, a, b)
    views = {}
    for side, record in (("a", a), ("b", b)):
        problem, stored = problem_of(storage, record)
        summary = {**diff[side], "id": record.id}
        offsets = {record.id: charts.offsets_of(problem, record.plan)} if record.plan else {}
        view = charts.plan_view(problem, [summary], offsets, stored.tensors or {}, selected=record.id, compare=None)
        view["x_range"] = [x0, x1] if x0 is not None and x1 is not None else None
        views[side] = view
    title = f"{diff['a']['title']} vs {diff['b']['title']}"
    return {"page_title": title, "diff": diff, "views": views}


def _largest_change_first(row: dict[str, Any]) -> tuple[int, str]:
    return -abs(row["delta"]), row["name"]


def _moved(problem_a: Problem, a: PlanRecord, problem_b: Problem, b: PlanRecord) -> list[dict[str, Any]]:
    """Tensors both plans place, at different offsets: what a strategy moved, largest first."""
    if not a.plan or not b.plan:
        return []
    where_a = _placed(problem_a, a)
    where_b = _placed(problem_b, b)
    rows = [
        {"name": name, "id_a": ia, "id_b": ib, "bytes": size, "offset_a": oa, "offset_b": ob}
        for name, (ia, oa, size) in where_a.items()
        if name in where_b and (ib := where_b[name][0]) is not None and (ob := where_b[name][1]) != oa
    ]
    return sorted(rows, key=lambda row: (-row["bytes"], row["name"]))


def _placed(problem: Problem, record: PlanRecord) -> dict[str, tuple[str, int, int]]:
    """name -> (buffer id, offset on the chart, bytes) of every placed buffer."""
    offsets = charts.offsets_of(problem, record.plan)
    return {
        (buf.name or buf.id): (buf.id, offset, buf.size)
        for buf, offset in zip(problem.buffers, offsets, strict=True)
        if offset is not None
    }


def _sizes(problem: Problem) -> dict[str, int]:
    return {b.name or b.id: b.size for b in problem.buffers}


def _side(storage: Storage, record: PlanRecord, problem: Problem, stored: ProblemRecord) -> dict[str, Any]:
    model = storage.get_model(stored.model_id) if stored.model_id else None
    peak = peak_step(problem)
    names = problem.step_names
    has_plan = bool(record.plan)
    return {
        "id": record.id,
        "strategy": record.strategy,
        "title": f"{model.name if model else problem.name or 'problem'} · {record.strategy}",
        "model": model_out(model) if model else None,
        "problem_id": record.problem_id,
        "options": stored.options,
        "buffers": len(problem.buffers),
        "steps": problem.steps,
        "arena_bytes": record.arena_bytes if has_plan else None,
        "lower_bound": record.lower_bound,
        "naive_bytes": record.naive_bytes,
        "valid": record.valid,
        "peak_step": peak,
        "peak_op": names[peak] if names and peak < len(names) else None,
        "links": {"page": f"/plans/{record.id}", "self": f"/api/v1/plans/{record.id}"},
    }
