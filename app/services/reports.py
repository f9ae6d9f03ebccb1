"""What the pages show, as data: the strategy list, a plan page's context (the same dict is the
page's JSON twin), and the offline report rendered from it."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment

from app.errors import AppError
from app.services import chart_windows, charts, graphs, library, notes, parameters, planning
from app.services.library import model_out
from app.services.paths import STATIC_DIR, plotly_js_path
from app.services.plans import problem_of
from app.storage import ModelRecord, PlanRecord, Storage
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
    problem, stored = problem_of(storage, record)
    siblings = storage.plans_of(record.problem_id)
    record = next((p for p in siblings if p.id == record.id), record)  # with its Plan JSON, read once
    other = resolve_compare(siblings, record, compare)
    tensors = stored["tensors"]
    summaries = [planning.summary(p, problem) for p in siblings]
    model = storage.get_model(stored["model_id"]) if stored["model_id"] else None
    compared = other.id if other else None
    if chart_windows.is_big(problem):  # an aggregate, and windows fetched as the user zooms in
        records = {p.id: p.plan for p in siblings if p.plan}
        view = charts.big_plan_view(
            record.problem_id, problem, summaries, records, selected=record.id, compare=compared, storage=storage
        )
        peak = chart_windows.peak_table(record.problem_id, problem, view["peak_step"], charts.PEAK_ROWS, storage)
    else:
        offsets = {p.id: charts.offsets_of(problem, p.plan) for p in siblings if p.plan}
        view = charts.plan_view(problem, summaries, offsets, tensors, selected=record.id, compare=compared)
        peak = charts.peak_table(problem, tensors, view["peak_step"])
    view["x_range"] = [x0, x1] if x0 is not None and x1 is not None else None
    view["query"] = q
    view["notes"] = notes.page_notes(storage, record)  # drawn on the offset chart by notes.js
    return {
        "page_title": f"{problem.name or 'problem'} · {record.strategy}",  # as plan_title
        "plan": planning.summary(record, problem),
        "compare": planning.summary(other, problem) if other else None,
        "problem": {
            "id": record.problem_id,
            "name": problem.name,
            "buffers": len(problem.buffers),
            "steps": problem.steps,
            "alignment": problem.alignment,
            "pools": [{"name": p.name, "capacity": p.capacity} for p in problem.pools],
            "options": stored["options"],
        },
        "model": model_out(model) if model else None,
        "plans": summaries,
        "peak": peak,
        "view": view,
        "notes": view["notes"],
        # An invalid plan runs only with the canary, which shows where it corrupts data.
        "runnable": model is not None and bool(record.plan),
    }


def plan_title(storage: Storage, record: PlanRecord, compare: str | None) -> str:
    """The plan page's title, and a bad ``compare`` refused (422) before the page starts."""
    if compare:
        resolve_compare(storage.plans_of(record.problem_id), record, compare)
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
    if not record.summary.get("symbolic_dims"):
        try:
            graph_facts = graphs.graph_facts(graphs.load_graph(library.model_path(storage, record), {}))
        except AppError as e:
            graph_error = e.detail
    return {
        "page_title": record.name,
        "model": model_out(record),
        "graph": graph_facts,
        "graph_error": graph_error,
        "strategies": strategy_list(),
        "memory": MemoryOptions().to_json(),  # the planning form's defaults
        "parameters": parameters.sharing(storage, record),
    }
