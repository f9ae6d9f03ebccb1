"""Plan a problem or a stored model with several strategies, store every outcome, and describe
the results.

Fast strategies answer inline; strategies the registry marks slow (or every strategy when
the caller asks for `background`) run as one job (`plan_task`, on a Dask worker, reading the
stored problem) whose progress is one step per strategy. A model planned with ``tile: "auto"``
is a job from the start (`plan_model_task`): the tiling search places up to a dozen tiled
graphs, seconds to a minute of work that no request waits on.
"""

from __future__ import annotations

from typing import Any

from app.errors import AppError, not_found
from app.jobs import Job, JobContext, JobFailed, JobService
from app.schemas import PlanRequest
from app.services import chart_windows, graphs, library
from app.services.plans import remember
from app.services.tiling import tile_choice, tile_graph, tiled_problem
from app.settings import active_limits
from app.storage import ModelRecord, PlanRecord, Storage, new_id
from planner import Problem, ProblemError, get, ratio
from planner import names as strategy_names
from planner.compare import StrategyResult, resolve_names, run_strategies
from planner.csvio import read_csv
from runtime.tiling import Tiling


def record_of(outcome: StrategyResult) -> PlanRecord:
    plan = outcome.plan
    problems = [outcome.error] if outcome.error else ([outcome.violations] if outcome.violations else [])
    return PlanRecord(
        id=new_id(),
        problem_id="",
        strategy=outcome.strategy,
        arena_bytes=plan.arena_bytes if plan else 0,
        lower_bound=outcome.lower_bound,
        naive_bytes=outcome.naive_bytes,
        seconds=outcome.seconds,
        valid=outcome.valid,
        violations=problems,
        plan=plan.to_json() if plan else {},
    )


def summary(record: PlanRecord, problem: Problem | None = None) -> dict[str, Any]:
    """A plan as the API lists it: size, yardsticks, validity, and pool fits."""
    has_plan = bool(record.plan)
    out: dict[str, Any] = {
        "id": record.id,
        "strategy": record.strategy,
        "arena_bytes": record.arena_bytes if has_plan else None,
        "lower_bound": record.lower_bound,
        "naive_bytes": record.naive_bytes,
        "seconds": round(record.seconds, 6),
        "valid": record.valid,
        "ratio": _rounded(ratio(record.arena_bytes if has_plan else None, record.lower_bound)),
        "error": "; ".join(record.violations) or None,
        "pools": [],
        "links": {"self": f"/api/v1/plans/{record.id}", "page": f"/plans/{record.id}"},
    }
    if has_plan and problem is not None:
        sizes = record.plan.get("pool_sizes", {})
        out["pools"] = [
            {
                "name": p.name,
                "bytes": sizes.get(p.name, 0),
                "capacity": p.capacity,
                "fits": p.capacity is None or sizes.get(p.name, 0) <= p.capacity,
            }
            for p in problem.pools
        ]
    elif not has_plan and problem is not None:
        out["pools"] = [{"name": p.name, "bytes": None, "capacity": p.capacity, "fits": False} for p in problem.pools]
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _store(storage: Storage, problem_id: str, outcomes: list[StrategyResult]) -> list[PlanRecord]:
    records = [record_of(o) for o in outcomes]
    records = [PlanRecord(**{**r.__dict__, "problem_id": problem_id}) for r in records]
    storage.add_plans(problem_id=problem_id, plans=records)
    return records


def plan_and_store(
    storage: Storage,
    jobs: JobService | None,
    problem: Problem,
    names: list[str],
    *,
    strategy_options: dict[str, Any],
    request_options: dict[str, Any],
    background: bool = False,
    inline: bool = False,
    model_id: str | None = None,
    tensors: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Store the problem, plan it with each strategy, and return what `PlansOut` describes.

    `jobs` may be None where every strategy is fast and nothing is `background`, or where `inline`
    runs every strategy here (inside a job).
    """
    strategy_options = active_limits().cap_time(strategy_options)  # no request outlasts plan_seconds
    problem_id = storage.add_problem(
        problem=problem.to_json(), options=request_options, model_id=model_id, tensors=tensors
    ).id
    remember(storage, problem_id, problem)  # the plan page need not parse 20,000 buffers again
    now = names if inline else [] if background else [n for n in names if not get(n).slow]
    later = [n for n in names if n not in now]
    records = _store(storage, problem_id, run_strategies(problem, now, **strategy_options)) if now else []
    # A big problem's page opens on its plans' chart columns: built now, and written where every process finds them.
    chart_windows.store_columns(storage, problem_id, problem, records)
    job = None
    if later:
        assert jobs is not None, f"{later} run as a job: plan_and_store needs the job service"
        job = jobs.submit(
            "plan",
            f"planning {problem.name or 'problem'} with {', '.join(later)}",
            plan_task,
            {"problem_id": problem_id, "names": later, "options": strategy_options},
            links={"problem": f"/api/v1/problems/{problem_id}"},
        )
    plans = [summary(r, problem) for r in records]
    return {
        "problem_id": problem_id,
        "plans": plans,
        "job": job.to_json() if job else None,
        "links": _links(problem_id, plans, job),
    }


def _links(problem_id: str, plans: list[dict[str, Any]], job: Job | None) -> dict[str, str]:
    links = {"problem": f"/api/v1/problems/{problem_id}"}
    best = best_of(plans)
    if best is not None:
        links["page"] = f"/plans/{best['id']}"
    if job is not None:
        links["job"] = f"/api/v1/jobs/{job.id}"
        links["job_page"] = f"/jobs/{job.id}"
    return links


def best_of(plans: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The valid plan with the smallest arena; ties go to the one listed first."""
    valid = [p for p in plans if p["valid"] and p["arena_bytes"] is not None]
    return min(valid, key=lambda p: p["arena_bytes"]) if valid else None


def plan_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The planning job, on a worker: plan the stored problem with each named strategy, storing each plan."""
    storage = job.storage
    problem_id, names, options = payload["problem_id"], payload["names"], payload["options"]
    stored = storage.get_problem(problem_id)
    if stored is None:
        raise JobFailed(f"problem {problem_id!r} was deleted before it was planned", 410)
    problem = Problem.from_json(stored.problem or {})
    done: list[dict[str, Any]] = []

    def on_done(outcome: StrategyResult) -> None:
        record = _store(storage, problem_id, [outcome])[0]
        chart_windows.store_columns(storage, problem_id, problem, [record])  # for the app processes to read
        done.append(summary(record, problem))
        job.report(len(done) / len(names), f"{outcome.strategy} done ({len(done)} of {len(names)})", plan=done[-1])

    job.report(0.0, f"planning with {names[0]}")
    run_strategies(problem, names, on_done=on_done, **options)
    all_plans = [summary(r, problem) for r in storage.plans_of(problem_id)]
    best = best_of(all_plans)
    return {"problem_id": problem_id, "plans": done, "page": f"/plans/{best['id']}" if best else None}


def plan_model(storage: Storage, jobs: JobService, record: ModelRecord, body: PlanRequest) -> dict[str, Any]:
    """Plan a stored model: inline, or as a job where `tile` is auto (the model is loaded here first,
    so that what is wrong with it or with the shapes still answers the request itself)."""
    made = _model_problem(storage, record, body)
    if body.tile != "auto":
        return _planned(storage, jobs, record, body, made, None)
    job = jobs.submit(
        "plan",
        f"planning {record.name} with tile auto ({', '.join(body.names())})",
        plan_model_task,
        {"model_id": record.id, "body": body.model_dump(mode="json")},
        links={"model": f"/api/v1/models/{record.id}"},
    )
    note = "the tiling search runs as a job: its result holds the plans, `tiling` and `tiling_note`"
    links = {"job": f"/api/v1/jobs/{job.id}", "job_page": f"/jobs/{job.id}"}
    return {"problem_id": None, "plans": [], "job": job.to_json(), "links": links, "tiling": None, "tiling_note": note}


def plan_model_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The job of a model planned with tile auto, on a worker: search the tiling, then plan the
    (tiled) model with every strategy, fast and slow, here."""
    storage = job.storage
    record = storage.get_model(payload["model_id"])
    if record is None:
        raise JobFailed(f"model {payload['model_id']!r} was deleted before it was planned", 410)
    body = PlanRequest.model_validate(payload["body"])
    made = _model_problem(storage, record, body)
    job.report(0.0, "searching tilings: placing candidate heads and band heights")
    tiling = tile_graph(made.graph, body.memory(), tile=body.tile, overhead=body.tile_overhead, slack=body.tile_slack)
    job.report(0.5, f"{tiling.note}; planning with {', '.join(body.names())}" if tiling else "planning")
    out = _planned(storage, None, record, body, made, tiling, inline=True)
    best = best_of(out["plans"])
    return out | {"page": f"/plans/{best['id']}" if best else None}


def _model_problem(storage: Storage, record: ModelRecord, body: PlanRequest) -> graphs.ModelProblem:
    library.check_dims(record, body.dims)
    library.check_shapes(record, body.shapes)
    return graphs.stored_model_problem(
        library.model_path(storage, record),
        body.memory(),
        dims=body.dims,
        shapes=body.shapes,
        reorder=body.reorder,  # the order found is stored with the plans: runs execute the nodes in it
        pools=[p.model_dump() for p in body.pools] if body.pools else None,
        name=record.name,
    )


def _planned(
    storage: Storage,
    jobs: JobService | None,
    record: ModelRecord,
    body: PlanRequest,
    made: graphs.ModelProblem,
    tiling: Tiling | None,
    *,
    inline: bool = False,
) -> dict[str, Any]:
    """Plan the model's problem (tiled by `tiling` when it took one) and store the plans; `inline`:
    every strategy runs here (inside a job), none as a job of its own."""
    memory = body.memory()
    graph, problem, found = made.graph, made.problem, made.reordered
    if tiling is not None:
        problem, graph = tiled_problem(problem, tiling, memory), tiling.graph
    strategy_options: dict[str, Any] = {"seed": body.seed}
    if body.time_limit is not None:
        strategy_options["time_limit"] = body.time_limit
    names = body.names()
    request_options = {**body.model_dump(exclude={"strategies", "background"}), "strategies": names}
    if found is not None:
        request_options["order"] = list(found.order)
    request_options["tile_choice"] = tile_choice(tiling)  # what a run of these plans tiles again
    request_options["tiling"] = tiling.to_json() if tiling is not None else None
    out = plan_and_store(
        storage,
        jobs,
        problem,
        names,
        strategy_options=strategy_options,
        request_options=request_options,
        background=body.background and not inline,
        inline=inline,
        model_id=record.id,
        tensors=graphs.tensor_facts(graph, problem),
    )
    if found is not None:
        out["reorder"] = found.summary()  # the method (exact, divided, heuristic) and whether proven optimal
    out["tiling"] = tiling.to_json() if tiling is not None else None
    if tiling is not None:
        out["tiling_note"] = tiling.note
    return out


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


def plan_problem(
    storage: Storage,
    jobs: JobService,
    problem: Problem,
    *,
    strategies: str,
    capacity: int | None,
    time_limit: float | None,
    seed: int,
    background: bool,
) -> dict[str, Any]:
    """Plan a bare problem from another runtime with the named strategies ('all' or a comma list)."""
    if capacity is not None:
        problem = problem.with_capacity(capacity)
    chosen = resolve_names(strategies)
    if not chosen:
        raise ProblemError(f"strategies: give at least one of {', '.join(strategy_names())} or 'all'")
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
    return plan_and_store(
        storage,
        jobs,
        problem,
        chosen,
        strategy_options=options,
        request_options=request_options,
        background=background,
    )


def problem_document(storage: Storage, problem_id: str) -> dict[str, Any]:
    """The stored problem (Problem JSON), the options that made it, and its plans."""
    stored = storage.get_problem(problem_id)
    if stored is None:
        raise not_found("problem", problem_id)
    problem = Problem.from_json(stored.problem or {})
    return {
        "id": problem_id,
        "model_id": stored.model_id,
        "options": stored.options,
        "problem": stored.problem,
        "plans": [summary(r, problem) for r in storage.plans_of(problem_id)],
    }
