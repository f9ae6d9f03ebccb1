"""What the pages show, as data: the strategy list, a plan page's context (the same dict is the
page's JSON twin), and the offline report rendered from it."""

from __future__ import annotations

import dataclasses
from typing import Any

from jinja2 import Environment

from app.errors import AppError
from app.services import (
    chart_windows,
    charts,
    graphs,
    library,
    notes,
    parameters,
    plan_heads,
    planning,
    readiness,
    tensor_table,
)
from app.services.library import model_out
from app.services.paths import STATIC_DIR, plotly_js_path
from app.services.planned_with import planned_with
from app.services.plans import problem_of
from app.storage import ModelRecord, PlanRecord, ProblemRecord, Storage
from planner import get, names
from runtime import MemoryOptions

# What the plan page runs, inlined into the offline report.
SCRIPTS = ("charts.js", "big_charts.js", "chart_pages.js", "review.js", "notes.js")


def strategy_list() -> list[dict[str, Any]]:
    return [
        {"name": s.name, "origin": s.origin, "summary": s.summary, "slow": s.slow, "exact": s.exact}
        for s in (get(name) for name in names())
    ]


def resolve_compare(plans: list[PlanRecord], selected: PlanRecord, compare: str | None) -> PlanRecord | None:
    """`compare` is a plan id or a strategy name among the plans of the same problem."""
    usable = [p for p in plans if p.plan]
    if compare:
        for p in usable:
            if compare in (p.id, p.strategy):
                return p
        accepted = ", ".join(sorted({p.strategy for p in usable}))
        raise AppError(422, f"compare: no plan {compare!r} for this problem; accepted: a plan id or one of {accepted}")
    others = sorted((p for p in usable if p.id != selected.id), key=lambda p: (p.arena_bytes, p.strategy))
    return others[0] if others else None


def plan_page_context(
    storage: Storage, record: PlanRecord, compare: str | None, x0: float | None, x1: float | None, q: str
) -> dict[str, Any]:
    big = _big_page(storage, record)
    problem: Any  # the Problem, or its ProblemHead standing in (`plan_heads`: what these functions read)
    if big is not None:  # the head and columns stored beside the plan: the problem is not read
        problem, stored, siblings = big
        count = problem.count
    else:
        problem, stored = problem_of(storage, record)
        siblings = storage.plans_of(record.problem_id)
        count = len(problem.buffers)
    record = next((p for p in siblings if p.id == record.id), record)  # with its Plan JSON, read once
    other = resolve_compare(siblings, record, compare)
    summaries = [planning.summary(p, problem) for p in siblings]
    model = storage.get_model(stored.model_id) if stored.model_id else None
    compared = other.id if other else None
    if big is not None or chart_windows.is_big(problem):  # an aggregate, and windows fetched as the user zooms in
        records = {p.id: p.plan for p in siblings if p.plan}
        view = charts.big_plan_view(
            record.problem_id, problem, summaries, records, selected=record.id, compare=compared, storage=storage
        )
        peak = chart_windows.peak_table(record.problem_id, problem, view["peak_step"], charts.PEAK_ROWS, storage)
    else:
        tensors = stored.tensors or {}
        offsets = {p.id: charts.offsets_of(problem, p.plan) for p in siblings if p.plan}
        view = charts.plan_view(problem, summaries, offsets, tensors, selected=record.id, compare=compared)
        peak = charts.peak_table(problem, tensors, view["peak_step"])
    view["x_range"] = [x0, x1] if x0 is not None and x1 is not None else None
    view["query"] = q
    view["notes"] = _big_notes(storage, record) if big is not None else notes.page_notes(storage, record)
    return {
        "page_title": f"{problem.name or 'problem'} · {record.strategy}",  # as plan_title
        "plan": planning.summary(record, problem),
        "compare": planning.summary(other, problem) if other else None,
        "problem": {
            "id": record.problem_id,
            "name": problem.name,
            "buffers": count,
            "steps": problem.steps,
            "alignment": problem.alignment,
            "pools": [{"name": p.name, "capacity": p.capacity} for p in problem.pools],
            "options": stored.options,
        },
        "model": model_out(model) if model else None,
        # A bare problem has no model options: its page says its own alignment and pools.
        "planned_with": planned_with(model.summary, stored.options) if model else None,
        "plans": summaries,
        "peak": peak,
        "view": view,
        "notes": view["notes"],
        # An invalid plan runs only with the canary, which shows where it corrupts data.
        "runnable": model is not None and bool(record.plan),
        "missing_kernels": readiness.missing_kernels(storage, model, stored.options) if model else [],
    }


def _big_page(
    storage: Storage, record: PlanRecord
) -> tuple[plan_heads.ProblemHead, ProblemRecord, list[PlanRecord]] | None:
    """A big plan's page without its problem: the head and every sibling plan's columns stored under
    the data folder, the problem's record and the plans read without their content (each plan stands
    for its Plan JSON with its pool sizes). None when something is not stored: the page reads it all."""
    head = plan_heads.stored(storage, record.problem_id)
    if head is None or head.count <= chart_windows.AGGREGATE_ABOVE:
        return None
    stored = storage.get_problem(record.problem_id, content=False)
    if stored is None:  # only if the database was edited by hand
        raise AppError(404, f"the problem of plan {record.id!r} is gone")
    siblings = []
    for plan in storage.plans_of(record.problem_id, placements=False):
        columns = chart_windows.stored_columns(storage, record.problem_id, plan.id)
        if columns is None and not plan.arena_bytes:  # its strategy made no plan (stored as 0 bytes)
            siblings.append(plan)
        elif columns is None or columns.pool_sizes is None:
            return None
        else:
            siblings.append(dataclasses.replace(plan, plan={"pool_sizes": columns.pool_sizes}))
    return head, stored, siblings


def _big_notes(storage: Storage, record: PlanRecord) -> list[dict[str, Any]]:
    """`notes.page_notes` with the tensors' places read from the plan's stored columns."""
    listed = notes.listing(storage, record)
    wanted = {note["tensor"] for note in listed if note["tensor"] is not None}
    columns = chart_windows.stored_columns(storage, record.problem_id, record.id) if wanted else None
    at = chart_windows.positions(columns, wanted) if columns is not None else {}
    return [
        {**note, "when": notes.when(note["created"]), **({"at": at[note["tensor"]]} if note["tensor"] in at else {})}
        for note in listed
    ]


def plan_title(storage: Storage, record: PlanRecord, compare: str | None) -> str:
    """The plan page's title, and a bad ``compare`` refused (422) before the page starts."""
    head = plan_heads.stored(storage, record.problem_id)
    if compare:
        plans = storage.plans_of(record.problem_id, placements=head is None)
        if head is not None:  # a plan without placements counts as made when its strategy made one
            plans = [dataclasses.replace(p, plan={"made": True}) if p.arena_bytes else p for p in plans]
        resolve_compare(plans, record, compare)
    if head is not None:
        return f"{head.name or 'problem'} · {record.strategy}"
    problem, _ = problem_of(storage, record)  # parsed once and kept: the page's body needs it next
    return f"{problem.name or 'problem'} · {record.strategy}"


def report_html(templates: Environment, storage: Storage, record: PlanRecord) -> str:
    """The offline report: the plan page's charts with plotly.js and memplan's script inlined."""
    context = plan_page_context(storage, record, None, None, None, "")
    template = templates.get_template("report.html")

    def inline(text: str) -> str:  # a script's text must not close its own <script> element
        return text.replace("</script", "<\\/script")

    return template.render(
        **context,
        plotly_js=inline(plotly_js_path().read_text(encoding="utf-8")),
        charts_js=inline("\n".join((STATIC_DIR / name).read_text(encoding="utf-8") for name in SCRIPTS)),
        css=(STATIC_DIR / "memplan.css").read_text(encoding="utf-8"),
    )


def model_page_context(storage: Storage, record: ModelRecord) -> dict[str, Any]:
    """A model's page: its summary, its graph's tensors by kind (when every dim is fixed), the
    strategies to plan with, and which of its parameters other stored models share."""
    graph_facts: dict[str, Any] | None = None
    graph_error = None
    tensors: dict[str, Any] | None = None
    if not record.summary.get("symbolic_dims"):
        try:
            graph = graphs.load_graph(library.model_path(storage, record), {})
            graph_facts, tensors = graphs.graph_facts(graph), tensor_table.tensor_rows(graph)
        except AppError as e:
            graph_error = e.detail
    return {
        "page_title": record.name,
        "model": model_out(record),
        "graph": graph_facts,
        "graph_error": graph_error,
        "tensors": tensors,  # every tensor's dtype and quantization (`tensor_table`)
        "strategies": strategy_list(),
        "memory": MemoryOptions().to_json(),  # the planning form's defaults
        "parameters": parameters.sharing(storage, record),
        "readiness": {
            "missing_kernels": readiness.missing_kernels(storage, record),
            "training": readiness.training(
                library.model_path(storage, record), record.summary, record.bytes, record.format
            ),
        },
    }
