"""Runs: execute a stored model inside a plan's arena, as a job, and check its outputs.

`start` resolves the plan in the app process and submits `run_task`, which a Dask worker runs
with ids and the request body (never a Storage or a closure). Progress is one event per op
(name, type, seconds). The verdict compares every output
with an independent oracle: onnxruntime when it is installed and accepts the model,
onnx.reference otherwise.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime
from app.errors import AppError
from app.jobs import Job, JobContext, JobFailed, JobService
from app.schemas import RunRequest
from app.services import graphs, library, readiness
from app.services.planning import plan_and_store
from app.services.tiling import apply_choice, tile_choice, tile_graph
from app.services.timed import Phases, timed_runs
from app.settings import active_limits
from app.storage import ModelRecord, Storage
from planner import Plan, Problem
from runtime import oracle
from runtime.states import fresh_capture

MAX_EVENTS_PER_RUN = 5000  # beyond this, progress events are thinned (the time chart keeps every op)


def start(storage: Storage, jobs: JobService, record: ModelRecord, body: RunRequest, npz: bytes | None) -> Job:
    """Resolve the plan to run (a stored one, or a fresh plan with `body.strategy`) and submit the job."""
    library.check_shapes(record, body.shapes)
    if body.plan_id is not None:
        plan_record = storage.get_plan(body.plan_id)
        stored = storage.get_problem(plan_record.problem_id) if plan_record else None
        if plan_record is None or stored is None or stored.model_id != record.id:
            raise AppError(404, f"plan_id: no plan {body.plan_id!r} of model {record.id!r}; plan the model first")
        if not plan_record.valid and not body.canary:
            raise AppError(
                409,
                f"plan {body.plan_id!r} ({plan_record.strategy}) is not valid and cannot be run; "
                "run it with canary on to see where it corrupts data",
            )
        options = stored.options
    else:
        # Zero-copy needs inputs and outputs outside the arena, where caller memory can be bound.
        memory = body.memory().replace(io="external") if body.zero_copy else body.memory()
        options = {"dims": body.dims, "shapes": body.shapes, **memory.to_json()}
        if body.tile == "auto":
            options["tile_choice"] = _tile_choice(storage, record, options, body)
        made = plan_and_store(
            storage,
            jobs,
            _problem(storage, record, options),
            [body.strategy],
            strategy_options={"seed": body.seed},
            request_options={**options, "strategies": [body.strategy], "pools": None, "seed": body.seed},
            model_id=record.id,
            tensors=None,
        )
        plan_id = made["plans"][0]["id"]
        plan_record = storage.get_plan(plan_id)
        if plan_record is None or not plan_record.valid:
            raise AppError(422, f"{body.strategy} gave no valid plan: {made['plans'][0].get('error')}")
    missing = readiness.missing_kernels(storage, record, options)
    if missing:
        ops = ", ".join(f"{op['op_type']} ({op['count']} node{'s' if op['count'] != 1 else ''})" for op in missing)
        raise AppError(
            422,
            f"memplan has no kernel for {ops}: it can plan this model's memory but cannot run it",
            title="Cannot run this model",
        )
    if npz is not None:
        _read_npz(npz)  # refused now (422) rather than in the job
    title = f"run {record.name} in the {plan_record.strategy} plan"
    payload = {
        "model_id": record.id,
        "plan_id": plan_record.id,
        "options": options,
        "body": body.model_dump(),
        "npz": npz,
    }
    return jobs.submit(
        "run", title, run_task, payload, links={"page": "/runs/{id}", "plan": f"/plans/{plan_record.id}"}
    )


def run_task(job: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The run job, on a worker: execute the model in the stored plan, store and return the result."""
    storage = job.storage
    record = storage.get_model(payload["model_id"])
    plan_record = storage.get_plan(payload["plan_id"])
    if record is None or plan_record is None:
        raise JobFailed(f"model {payload['model_id']!r} or plan {payload['plan_id']!r} was deleted before the run", 410)
    body = RunRequest.model_validate(payload["body"])
    options = payload["options"]
    inputs = _read_npz(payload["npz"]) if payload["npz"] is not None else None
    result = execute(job, storage, record, options, Plan.from_json(plan_record.plan), inputs, body)
    result["plan_id"] = plan_record.id
    result["options"] = {**options, "zero_copy": body.zero_copy, "seed": body.seed}
    result["rerun"] = {"url": f"/api/v1/models/{record.id}/runs", "body": rerun_body(plan_record.strategy, options)}
    storage.add_run(run_id=job.id, model_id=record.id, plan_id=plan_record.id, result=result)
    return result


def _problem(storage: Storage, record: ModelRecord, options: dict[str, Any]) -> Problem:
    memory = graphs.memory_of(options)
    path = library.model_path(storage, record)
    order = options.get("order")  # the order the plan was made for
    made = graphs.stored_model_problem(
        path, memory, dims=options.get("dims", {}), shapes=options.get("shapes"), order=order, name=record.name
    )
    if options.get("tile_choice"):
        return graphs.model_problem(apply_choice(made.graph, options["tile_choice"]), memory, name=record.name)
    return made.problem


def _tile_choice(storage: Storage, record: ModelRecord, options: dict[str, Any], body: RunRequest) -> Any:
    """The tiling `tile_auto` chooses for a fresh plan of a run (None when nothing pays)."""
    made = graphs.stored_model_problem(
        library.model_path(storage, record), graphs.memory_of(options), dims=body.dims, shapes=body.shapes
    )
    memory = graphs.memory_of(options)
    tiling = tile_graph(made.graph, memory, tile=body.tile, overhead=body.tile_overhead, slack=body.tile_slack)
    return tile_choice(tiling)


def _read_npz(data: bytes) -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as e:
        raise AppError(
            422, f"inputs: not a readable .npz ({type(e).__name__}: {e}); save one with numpy.savez(path, name=array)"
        ) from None


def execute(
    job: JobContext,
    storage: Storage,
    record: ModelRecord,
    options: dict[str, Any],
    plan: Plan,
    inputs: dict[str, np.ndarray] | None,
    body: RunRequest,
) -> dict[str, Any]:
    path = library.model_path(storage, record)
    memory = graphs.memory_of(options)
    phases = Phases()
    job.report(0.0, "loading the model")
    with phases("loading the model"):
        graph = graphs.load_graph(path, options.get("dims", {}), shapes=options.get("shapes"), fuse=memory.fuse)
        graph = apply_choice(graphs.in_order(graph, options.get("order")), options.get("tile_choice"))  # as planned
    try:
        feeds = inputs if inputs is not None else oracle.random_inputs(graph, body.seed)
    except runtime.ModelError as e:
        raise JobFailed(f"{e}; upload an .npz with it", 422) from None
    missing = sorted(set(graph.inputs) - set(feeds))
    if missing:
        raise JobFailed(f"inputs: the .npz lacks {missing}; the model's inputs are {list(graph.inputs)}", 422)
    # With the canary, an invalid plan runs until the step where it corrupts a live tensor.
    session = runtime.Session(
        graph, plan, memory, canary=body.canary, check=not body.canary, max_arena_bytes=active_limits().max_arena_bytes
    )
    job.report(0.0, "preparing: kernels, views into the arena")
    try:
        with phases("preparing kernels and arena views"):
            session.prepare()
            run_feeds = bind_io(session, feeds) if body.zero_copy else feeds
    except runtime.UnsupportedOpError as e:
        raise JobFailed(readiness.kernel_message(e.ops), 422) from None
    except runtime.ModelError as e:
        raise JobFailed(f"the plan cannot be run: {e}", 422) from None
    outputs, elapsed, times, stats = execute_measured(
        job, session, session, graph.nodes, run_feeds, "the model", phases=phases
    )
    job.report(1.0, "checking the outputs against an oracle")
    with phases("checking the outputs against the oracle"):
        verdict = oracle.verify(path, feeds, outputs, body.verify, capture=fresh_capture(session, run_feeds))
    return {
        "model_id": record.id,
        "strategy": plan.strategy,
        "seconds": elapsed,
        "steps": times,
        "outputs": [describe_output(name, value) for name, value in outputs.items()],
        "verdict": verdict,
        "arena_bytes": plan.arena_bytes,
        "stats": stats,
        "job_phases": phases.to_json(),
        **copy_figures(session),
        "seed": body.seed if inputs is None else None,
        "inputs": "uploaded .npz" if inputs is not None else f"random, seed {body.seed}",
        "canary": body.canary,  # every step checked, no hit: a hit fails the run at its step
    }


def rerun_body(strategy: str, options: dict[str, Any]) -> dict[str, Any]:
    """The request that runs the same model again with a fresh plan (the run page's zero-copy toggle
    flips `zero_copy` in it, which decides `io`)."""
    memory = graphs.memory_of(options).to_json()
    memory.pop("io")
    return {"strategy": strategy, "dims": options.get("dims", {}), "shapes": options.get("shapes", {}), **memory}


def bind_io(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Bind `feeds` and fresh output arrays as the caller's memory (`Session.bind_input`/`bind_output`,
    a `Pipeline` forwards both); the run then needs no feeds. A binding that cannot be zero-copy is
    still made: the session copies and the run's `fallbacks` say why."""
    graph = session.graph
    for name in graph.inputs:
        session.bind_input(name, np.ascontiguousarray(feeds[name]))
    for name in graph.outputs:
        t = graph.tensors[name]
        session.bind_output(name, np.empty(t.shape, t.dtype))
    return {}


def copy_figures(session: Any) -> dict[str, Any]:
    """Copies into and out of the arena in the run, and why each bound tensor was copied (if it was)."""
    stats = session.stats
    if stats is None:
        return {"copies": None, "copied_bytes": None, "fallbacks": {}}
    return {"copies": stats.copies, "copied_bytes": stats.copied_bytes, "fallbacks": dict(stats.fallbacks)}


def execute_with_progress(
    job: JobContext, runner: Any, nodes: Sequence[Any], feeds: dict[str, np.ndarray], what: str
) -> tuple[dict[str, np.ndarray], float, list[dict[str, Any]]]:
    """Run a prepared session or pipeline, reporting each op to the job (thinned past
    MAX_EVENTS_PER_RUN events; the returned per-op times keep every op)."""
    times: list[dict[str, Any]] = []
    every = max(1, max(len(nodes), 1) // MAX_EVENTS_PER_RUN)

    def on_step(index: int, steps: int, name: str, seconds: float) -> None:
        op_type = nodes[index].op_type if index < len(nodes) else ""
        times.append({"step": index, "name": name, "op_type": op_type, "seconds": seconds})
        if index % every == 0 or index == steps - 1:
            job.report((index + 1) / steps, f"{name} ({op_type})", step=index, op=name, seconds=seconds)

    started = time.perf_counter()
    try:
        outputs = runner.run(feeds, on_step=on_step)
    except runtime.CanaryError as e:
        hit = {
            "step": e.step,
            "node": e.node,
            "tensors": [
                {"name": name, "first_byte": lo, "end": hi, "bytes": count}
                for name, (lo, hi, count) in sorted(e.clobbered.items())
            ],
        }
        raise JobFailed(str(e), 422, canary=hit) from None
    except (runtime.ModelError, runtime.ExecutionError) as e:
        raise JobFailed(f"{what} cannot run: {e}", 422) from None
    return outputs, time.perf_counter() - started, times


def execute_measured(
    job: JobContext,
    runner: Any,
    session: runtime.Session,
    nodes: Sequence[Any],
    feeds: dict[str, np.ndarray],
    what: str,
    *,
    phases: Phases | None = None,
) -> tuple[dict[str, np.ndarray], float, list[dict[str, Any]], dict[str, Any]]:
    """`execute_with_progress` (the run followed live, its wall time mostly progress reports), then
    untraced timed runs whose median is the run's time (returned as the seconds), then one more run
    traced for the bytes allocated beside the arena: timed runs are never traced (tracemalloc slows
    kernels several times over), so their times and the per-step times are the kernels' own."""
    phases = phases or Phases()
    with phases("the run followed live (a progress report per step)"):
        outputs, followed, times = execute_with_progress(job, runner, nodes, feeds, what)
    job.report(1.0, "timing untraced runs")
    with phases("timed runs"):
        timing = timed_runs(runner, session, feeds)
    stats = run_stats(session)
    with phases("a traced run for the bytes beside the arena"):
        runner.run(feeds, measure="memory")
    stats["outside_arena_bytes"] = session.stats.outside_arena_bytes if session.stats else None
    stats["timed_runs"] = timing["runs"]
    stats["followed_run_seconds"] = followed
    if timing["step_seconds"] is not None and len(timing["step_seconds"]) == len(times):
        # The first run warms caches and reports each step: each step's time is its timed runs' median.
        times = [{**t, "seconds": s} for t, s in zip(times, timing["step_seconds"], strict=True)]
    return outputs, timing["median_seconds"], times, stats


def run_stats(session: runtime.Session) -> dict[str, Any]:
    """The run's scalar figures (arena, bytes outside it, copies, seconds)."""
    stats = session.stats
    if stats is None:
        return {}
    return {k: v for k, v in vars(stats).items() if isinstance(v, int | float | str | bool | type(None))}


def describe_output(name: str, value: np.ndarray) -> dict[str, Any]:
    numeric = value.dtype.kind in "fiub" and value.size
    flat = value.reshape(-1)
    return {
        "name": name,
        "shape": list(value.shape),
        "dtype": str(value.dtype),
        "min": float(flat.min()) if numeric else None,
        "max": float(flat.max()) if numeric else None,
        "mean": float(flat.astype(np.float64).mean()) if numeric else None,
        "first": [float(x) for x in flat[:6]] if numeric else [],
    }
