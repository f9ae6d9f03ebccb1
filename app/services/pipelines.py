"""Pipelines of stored models: planned as one joint arena, run as a job, checked model by model.

A pipeline is stored as a planning problem without a model: its options hold the pipeline
(models by name, connections, dims) and the arenas each model would need planned alone, so
the pipeline id is the problem id and the plan page shows its offsets like any other plan.
A run chains an independent oracle through the models (each model's oracle outputs feed
the next one's connected inputs) and compares the pipeline's outputs with the last links.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import runtime
from app.errors import AppError, not_found
from app.jobs import Job, JobContext, JobFailed, JobService
from app.schemas import PipelineRequest, PipelineRunRequest
from app.services import library
from app.services.graphs import MEMORY_FIELDS, load_graph, memory_of, model_problem, tensor_facts
from app.services.library import check_dims
from app.services.planning import plan_and_store
from app.services.runs import bind_io, copy_figures, describe_output, execute_measured
from app.settings import active_limits
from app.storage import ModelRecord, Storage
from planner import Plan, get
from runtime import oracle
from runtime.conditioning import tolerance
from runtime.pipeline import Pipeline


def _records(storage: Storage, models: dict[str, str]) -> dict[str, ModelRecord]:
    records = {}
    for name, model_id in models.items():
        record = storage.get_model(model_id)
        if record is None:
            raise AppError(404, f"models.{name}: no model with id {model_id!r}; list them at /api/v1/models")
        records[name] = record
    return records


def _graphs(
    storage: Storage, records: dict[str, ModelRecord], dims: dict[str, dict[str, int]], *, fuse: bool
) -> dict[str, Any]:
    unknown = sorted(set(dims) - set(records))
    if unknown:
        raise AppError(422, f"dims: {unknown[0]!r} is not a model of the pipeline; its models are {list(records)}")
    graphs = {}
    for name, record in records.items():
        check_dims(record, dims.get(name, {}))
        graphs[name] = load_graph(library.model_path(storage, record), dims.get(name, {}), fuse=fuse)
    return graphs


def _pipeline(graphs: dict[str, Any], spec: dict[str, Any], plan: Plan | str, **options: Any) -> Pipeline:
    try:
        return Pipeline(
            graphs,
            spec["connections"],
            plan,
            memory_of(spec),
            **options,
        )
    except runtime.ModelError as e:
        raise AppError(422, f"connections: {e}", title="Invalid pipeline") from None


def plan_pipeline(storage: Storage, jobs: JobService, body: PipelineRequest) -> dict[str, Any]:
    """Plan the pipeline's joint arena, store it, and describe it (joint against separate arenas)."""
    if get(body.strategy).slow:
        raise AppError(422, f"strategy: {body.strategy} runs as a job; plan a pipeline with a fast strategy")
    records = _records(storage, body.models)
    memory = body.memory()
    graphs = _graphs(storage, records, body.dims, fuse=memory.fuse)
    spec = body.model_dump(include={"models", "connections", "dims", "strategy", *MEMORY_FIELDS})
    pipe = _pipeline(graphs, spec, body.strategy)
    name = "+".join(records[n].name for n in body.models)
    problem = model_problem(pipe.graph, memory, name=name)
    separate = pipe.separate_arena_bytes()
    made = plan_and_store(
        storage,
        jobs,
        problem,
        [body.strategy],
        strategy_options={"seed": body.seed},
        request_options={"pipeline": spec, "separate_arena_bytes": separate, "strategies": [body.strategy]},
        tensors=tensor_facts(pipe.graph, problem),
    )
    return describe(storage, made["problem_id"])


def describe(storage: Storage, pipeline_id: str) -> dict[str, Any]:
    """A stored pipeline: its models, connections, joint plan, and the separate arenas it replaces."""
    stored = storage.get_problem(pipeline_id)
    if stored is None or "pipeline" not in stored.options:
        raise not_found("pipeline", pipeline_id)
    spec = stored.options["pipeline"]
    separate: dict[str, int] = stored.options["separate_arena_bytes"]
    plans = storage.plans_of(pipeline_id)
    plan = plans[0] if plans else None
    joint = plan.arena_bytes if plan is not None and plan.valid else None
    total = sum(separate.values())
    models = {}
    for name, model_id in spec["models"].items():
        record = storage.get_model(model_id)
        models[name] = {"id": model_id, "name": record.name if record else None, "page": f"/models/{model_id}"}
    return {
        "id": pipeline_id,
        "name": (stored.problem or {}).get("name"),
        "models": models,
        "connections": spec["connections"],
        "dims": spec["dims"],
        "strategy": spec["strategy"],
        "io": spec["io"],
        "plan_id": plan.id if plan else None,
        "valid": bool(plan and plan.valid),
        "error": "; ".join(plan.violations) if plan and not plan.valid else None,
        "joint_arena_bytes": joint,
        "separate_arena_bytes": separate,
        "separate_total_bytes": total,
        "saved_bytes": total - joint if joint is not None else None,
        "ratio": round(joint / total, 6) if joint is not None and total else None,
        "links": {
            "self": f"/api/v1/pipelines/{pipeline_id}",
            "page": f"/pipelines/{pipeline_id}",
            "runs": f"/api/v1/pipelines/{pipeline_id}/runs",
            **({"plan": f"/plans/{plan.id}"} if plan else {}),
        },
    }


def start_run(storage: Storage, jobs: JobService, pipeline_id: str, body: PipelineRunRequest) -> Job:
    """Submit a run of the stored pipeline in its joint plan (`run_task`); the run page follows it."""
    info = describe(storage, pipeline_id)
    if not info["valid"]:
        raise AppError(409, f"pipeline {pipeline_id!r} has no valid plan to run: {info['error']}")
    title = f"run pipeline {info['name']} in its joint {info['strategy']} plan"
    payload = {"pipeline_id": pipeline_id, "plan_id": info["plan_id"], "body": body.model_dump()}
    return jobs.submit(
        "run", title, run_task, payload, links={"page": "/runs/{id}", "plan": f"/plans/{info['plan_id']}"}
    )


def run_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The pipeline run job, on a worker: run the models in the joint plan, store and return the result."""
    storage = job.storage
    pipeline_id, body = payload["pipeline_id"], PipelineRunRequest.model_validate(payload["body"])
    plan_record = storage.get_plan(payload["plan_id"])
    stored = storage.get_problem(pipeline_id)
    if plan_record is None or stored is None:
        raise JobFailed(f"pipeline {pipeline_id!r} or its plan was deleted before the run", 410)
    spec = stored.options["pipeline"]
    try:
        records = _records(storage, spec["models"])
    except AppError as e:
        raise JobFailed(e.detail, 410) from None
    result = execute(job, storage, records, spec, Plan.from_json(plan_record.plan), body)
    result.update(
        plan_id=plan_record.id,
        pipeline_id=pipeline_id,
        options={**spec, "zero_copy": body.zero_copy, "seed": body.seed},
        rerun={
            "url": f"/api/v1/pipelines/{pipeline_id}/runs",
            "body": {"seed": body.seed, "verify": body.verify, "canary": body.canary},
        },
    )
    storage.add_run(run_id=job.id, model_id=None, plan_id=plan_record.id, result=result)  # no single model
    return result


def execute(
    job: JobContext, storage: Storage, records: dict[str, ModelRecord], spec: dict[str, Any], plan: Plan, body: Any
) -> dict[str, Any]:
    job.report(0.0, "loading the models")
    graphs = _graphs(storage, records, spec["dims"], fuse=memory_of(spec).fuse)
    try:
        limit = active_limits().max_arena_bytes
        pipe = _pipeline(graphs, spec, plan, max_arena_bytes=limit, canary=body.canary)
        feeds = oracle.random_inputs(pipe.graph, body.seed)
        job.report(0.0, "preparing: kernels, views into the joint arena")
        pipe.prepare()
        run_feeds = bind_io(pipe, feeds) if body.zero_copy else feeds
    except (runtime.ModelError, AppError) as e:
        raise JobFailed(f"the pipeline cannot be run: {getattr(e, 'detail', e)}", 422) from None
    outputs, elapsed, times, stats = execute_measured(
        job, pipe, pipe.session, pipe.graph.nodes, run_feeds, "the pipeline"
    )
    job.report(1.0, "checking the outputs against an oracle, model by model")
    paths = {n: library.model_path(storage, r) for n, r in records.items()}
    return {
        "model_id": None,
        "strategy": plan.strategy,
        "seconds": elapsed,
        "steps": times,
        "outputs": [describe_output(name, value) for name, value in outputs.items()],
        "verdict": chained_verdict(paths, spec["connections"], feeds, outputs, body.verify),
        "arena_bytes": plan.arena_bytes,
        "stats": stats,
        **copy_figures(pipe.session),
        "seed": body.seed,
        "inputs": f"random, seed {body.seed}",
        "canary": body.canary,  # every step checked, no hit: a hit fails the run at its step
    }


def chained_verdict(
    paths: dict[str, Path],
    connections: dict[str, str],
    feeds: dict[str, np.ndarray],
    outputs: dict[str, np.ndarray],
    prefer: str,
) -> dict[str, Any]:
    """Run each model alone through the oracle, in order, feeding connected inputs from the oracle's own
    outputs of the model before; compare the pipeline's outputs with what the oracle produced."""
    if prefer == "none":
        return {"oracle": None, "passed": None, "detail": "verification skipped"}
    fed_by = {dest: source for source, dest in connections.items()}
    produced: dict[str, np.ndarray] = {}
    fed: dict[str, dict[str, np.ndarray]] = {}  # what the oracle was given, model by model
    used: set[str] = set()
    for name, path in paths.items():
        graph_inputs = [i.split(":", 1)[1] for i in [*feeds, *fed_by] if i.startswith(f"{name}:")]
        model_feeds = fed[name] = {
            t: produced[fed_by[f"{name}:{t}"]] if f"{name}:{t}" in fed_by else feeds[f"{name}:{t}"]
            for t in dict.fromkeys(graph_inputs)
        }
        oracle_name, values, notes = oracle.oracle_outputs(path, model_feeds, prefer)
        if values is None:
            return {
                "oracle": None,
                "passed": None,
                "detail": f"no oracle could run model {name!r}: " + "; ".join(notes),
            }
        used.add(oracle_name or "")
        produced.update({f"{name}:{k}": v for k, v in values.items()})
    rows = []
    for name, got in outputs.items():
        want = np.asarray(produced[name])
        same = want.shape == got.shape
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if same and got.size else 0.0
        close = same and bool(np.all(_within(got, want)))
        row: dict[str, Any] = {"name": name, "max_abs_diff": diff, "close": close, "shape_matches": same}
        if same and not close and got.dtype.kind == "f":
            model, tensor = name.split(":", 1)
            row.update(_conditioning(paths[model], fed[model], tensor, got, prefer))
        rows.append(row)
    ill = [r for r in rows if "evidence" in r]
    failed = [r for r in rows if not r["close"] and "evidence" not in r]
    return {
        "verdict": "failed" if failed else "ill-conditioned" if ill else "passed",
        "oracle": " + ".join(sorted(used)) + " (model by model)",
        "passed": False if failed else None if ill else True,
        "check": "every element within rtol*|oracle| + max(atol, rtol*rms of its output); an output outside "
        "that is looked at again with the oracle's own spread on the model that computes it",
        "rtol": oracle.RTOL,
        "atol": oracle.ATOL,
        "outputs": rows,
        "notes": [],
    }


def _within(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if got.dtype.kind != "f" or want.dtype.kind != "f":
        return np.asarray(got == want)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return (diff <= tolerance(want, oracle.RTOL, oracle.ATOL)) | (np.isnan(got) & np.isnan(want)) | (got == want)


def _conditioning(
    path: Path, model_feeds: dict[str, np.ndarray], tensor: str, got: np.ndarray, prefer: str
) -> dict[str, Any]:
    """An output beyond the tolerance judged again on the model that computes it, from the oracle's own
    inputs to that model: ill-conditioned (with its evidence) when the oracle cannot reproduce itself
    there. memplan's values inside the chain are not kept, so nothing upstream can be its witness and
    such an output decides nothing (`passed` None)."""
    judged = oracle.verify(path, model_feeds, {tensor: got}, prefer)
    (row,) = judged.get("outputs") or [{}]
    found: dict[str, Any] = {"ill_conditioned": row.get("ill_conditioned")}
    if "evidence" in row:
        found["evidence"] = row["evidence"]
    return found
