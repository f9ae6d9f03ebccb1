"""HTML pages. Each has a JSON twin: the same URL with ``?format=json`` (or ``Accept:
application/json``) returns exactly the data the template gets, so a page can be tested,
scripted and permalinked like the API."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from app import analysis, charts, library, parameters, pipelines, planning
from app.api.models import model_out
from app.api.plans import problem_of
from app.deps import JobDep, JobsDep, ModelDep, PlanDep, SettingsDep, StorageDep
from app.errors import AppError, not_found
from app.storage import PlanRecord, Storage
from planner import get, names

router = APIRouter(include_in_schema=False)


def wants_json(request: Request) -> bool:
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def render(request: Request, template: str, context: dict[str, Any]) -> Response:
    if wants_json(request):
        return JSONResponse({"page": template.removesuffix(".html"), **context})
    return request.app.state.templates.TemplateResponse(request, template, context)


def strategy_list() -> list[dict[str, Any]]:
    return [
        {"name": s.name, "origin": s.origin, "summary": s.summary, "slow": s.slow, "exact": s.exact}
        for s in (get(name) for name in names())
    ]


@router.get("/")
def home(request: Request, storage: StorageDep, settings: SettingsDep) -> Response:
    return render(
        request,
        "home.html",
        {
            "page_title": "memplan",
            "models": [model_out(r) for r in storage.list_models()],
            "examples": library.examples(),
            "strategies": strategy_list(),
            "max_upload_bytes": settings.max_upload_bytes,
        },
    )


@router.post("/examples/{name}")
async def open_example(name: str, storage: StorageDep) -> RedirectResponse:
    """The gallery's one click: store the example (once) and go to its model page."""
    record, _ = await run_in_threadpool(library.import_example, storage, name)
    return RedirectResponse(f"/models/{record.id}", status_code=303)


@router.get("/models/{model_id}")
async def model_page(request: Request, record: ModelDep, storage: StorageDep) -> Response:
    graph_facts: dict[str, Any] | None = None
    graph_error = None
    if not record.summary.get("symbolic_dims"):
        try:
            graph = await run_in_threadpool(analysis.load_graph, library.model_path(storage, record), {})
            graph_facts = analysis.graph_facts(graph)
        except AppError as e:
            graph_error = e.detail
    return render(
        request,
        "model.html",
        {
            "page_title": record.name,
            "model": model_out(record),
            "graph": graph_facts,
            "graph_error": graph_error,
            "strategies": strategy_list(),
            "parameters": await run_in_threadpool(parameters.sharing, storage, record),
        },
    )


def _resolve_compare(plans: list[PlanRecord], selected: PlanRecord, compare: str | None) -> PlanRecord | None:
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
    other = _resolve_compare(siblings, record, compare)
    tensors = stored["tensors"]
    summaries = [planning.summary(p, problem) for p in siblings]
    offsets = {p.id: charts.offsets_of(problem, p.plan) for p in siblings if p.plan}
    model = storage.get_model(stored["model_id"]) if stored["model_id"] else None
    view = charts.plan_view(
        problem, summaries, offsets, tensors, selected=record.id, compare=other.id if other else None
    )
    view["x_range"] = [x0, x1] if x0 is not None and x1 is not None else None
    view["query"] = q
    return {
        "page_title": f"{problem.name or 'problem'} · {record.strategy}",  # as _plan_title
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
        "peak": charts.peak_table(problem, tensors, view["peak_step"]),
        "view": view,
        "runnable": model is not None and record.valid,
    }


@router.get("/plans/{plan_id}")
async def plan_page(
    request: Request,
    record: PlanDep,
    storage: StorageDep,
    compare: str | None = None,
    x0: Annotated[float | None, Query()] = None,
    x1: Annotated[float | None, Query()] = None,
    q: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Strategy comparison, live bytes with the peak, and two offset charts side by side.

    ``compare`` (plan id or strategy), ``x0``/``x1`` (step range) and ``q`` (tensor search)
    reopen exactly the same view.
    """
    if wants_json(request):
        return render(
            request, "plan.html", await run_in_threadpool(plan_page_context, storage, record, compare, x0, x1, q)
        )
    title = await run_in_threadpool(_plan_title, storage, record, compare)
    build = partial(plan_page_context, storage, record, compare, x0, x1, q)
    return StreamingResponse(_head_first(request, "plan.html", title, build), media_type="text/html; charset=utf-8")


def _plan_title(storage: Storage, record: PlanRecord, compare: str | None) -> str:
    """The plan page's title, and a bad ``compare`` refused (422) before the page starts."""
    if compare:
        _resolve_compare(storage.plans_of(record.problem_id), record, compare)
    stored = storage.get_problem(record.problem_id)
    name = stored["problem"].get("name") if stored else None
    return f"{name or 'problem'} · {record.strategy}"


HEAD_END = "</head>"


async def _head_first(
    request: Request, template_name: str, title: str, build: Callable[[], dict[str, Any]]
) -> AsyncIterator[str]:
    """The page's head at once, then the rest once `build` has made the context.

    The head names plotly.js (4.8 MB): the browser fetches and compiles it while the server
    is still building a large page, instead of after. The head needs only the title.
    """
    template = request.app.state.templates.get_template(template_name)
    head = ""
    for chunk in template.generate(request=request, page_title=title):  # stops before the body renders
        head += str(chunk)  # str: adding a str to Markup would escape it
        if HEAD_END in head:
            break
    yield head[: head.index(HEAD_END) + len(HEAD_END)]
    try:
        context = await run_in_threadpool(build)
    except AppError as e:  # the status is sent already: say what went wrong on the page
        yield f'<body><div class="error-box" role="alert">{html.escape(e.detail)}</div></body></html>'
        return
    page = await run_in_threadpool(template.render, request=request, **context)
    yield page[page.index(HEAD_END) + len(HEAD_END) :]


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, jobs: JobsDep) -> Response:
    job = jobs.get(job_id)
    if job is None:
        raise not_found("job", job_id)
    if job.kind == "run":
        return RedirectResponse(f"/runs/{job_id}", status_code=303)
    if job.kind == "training":
        return RedirectResponse(f"/training/demo/{job_id}", status_code=303)
    return render(request, "job.html", {"page_title": job.title, "job": job.to_json()})


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str, jobs: JobsDep, storage: StorageDep) -> Response:
    job = jobs.get(run_id)
    if job is not None and job.kind == "run":
        data = {"job": job.to_json(), "result": job.result}
    else:
        stored = storage.get_run(run_id)
        if stored is None:
            raise not_found("run", run_id)
        data = {"job": None, "result": stored}
    return render(request, "run.html", {"page_title": "run", "run_id": run_id, **data})


def report_html(request: Request, storage: Storage, record: PlanRecord) -> str:
    """The offline report: the plan page's charts with plotly.js and memplan's script inlined."""
    from app.main import STATIC_DIR, plotly_js_path

    context = plan_page_context(storage, record, None, None, None, "")
    template = request.app.state.templates.get_template("report.html")

    def inline(text: str) -> str:  # a script's text must not close its own <script> element
        return text.replace("</script", "<\\/script")

    return template.render(
        **context,
        plotly_js=inline(plotly_js_path().read_text(encoding="utf-8")),
        charts_js=inline((STATIC_DIR / "charts.js").read_text(encoding="utf-8")),
        css=(STATIC_DIR / "memplan.css").read_text(encoding="utf-8"),
    )


@router.get("/pipelines")
def pipeline_form(request: Request, storage: StorageDep) -> Response:
    """Pick stored models and connect them into a pipeline (the form posts to /api/v1/pipelines)."""
    models = [model_out(r) for r in storage.list_models()]
    fast = [s for s in strategy_list() if not s["slow"]]
    return render(request, "pipelines.html", {"page_title": "pipeline", "models": models, "strategies": fast})


@router.get("/pipelines/{pipeline_id}")
async def pipeline_page(request: Request, pipeline_id: str, storage: StorageDep) -> Response:
    """The joint arena against the models' separate arenas, and a run button."""
    info = await run_in_threadpool(pipelines.describe, storage, pipeline_id)
    return render(request, "pipeline.html", {"page_title": f"pipeline {info['name']}", "pipeline": info})


@router.get("/training")
def training_page(request: Request) -> Response:
    """The training demo's form: an MLP or a small CNN learns 8x8 digits inside one arena."""
    fast = [s for s in strategy_list() if not s["slow"]]
    return render(request, "training.html", {"page_title": "training demo", "job": None, "strategies": fast})


@router.get("/training/demo/{job_id}")
def training_demo_page(request: Request, job: JobDep) -> Response:
    """One demo run: the loss per step (live while it trains) and both plans by category."""
    if job.kind != "training":
        raise AppError(404, f"job {job.id!r} is a {job.kind} job, not a training demo; see /jobs/{job.id}")
    fast = [s for s in strategy_list() if not s["slow"]]
    return render(request, "training.html", {"page_title": "training demo", "job": job.to_json(), "strategies": fast})
