"""Sweeps: every model x strategy x dims combination planned, spread over the Dask workers; the
first use of many workers.

A combination is a `SweepTask` (one model, dims, memory options and strategy: one result row).
The tasks of one (model, dims, memory options) are run together as one Dask task, a `SweepGroup`
(`groups_of`, `plan_group`): its worker loads the model with its dims bound and builds the memory
problem once, then plans it with each strategy and checks each plan. A sweep of few combinations is
cut into more, smaller groups, so that every worker has some. Everything a group needs travels in
it: the model's file, not a database handle, so any worker that sees the data folder can run it.
"""

from __future__ import annotations

import csv
import io
import itertools
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import planner
import runtime
from app.errors import AppError
from app.jobs import PROGRESS_WRITE_S, Job, JobContext, JobFailed, JobService
from app.services.graphs import problem_of_model
from app.services.inputs import InputError
from app.services.tiling import tile_graph, tiled_problem
from app.storage import Storage
from runtime import MemoryOptions
from runtime.shapes import check_shapes

ROW_FIELDS = ("model", "model_name", "strategy", "dims", "arena_bytes", "lower_bound", "valid", "seconds", "error")
Shapes = tuple[tuple[str, tuple[int, ...]], ...]  # whole input shapes, by input name, sorted
PROBLEM_CACHE = 8  # (model, dims) problems a worker keeps, for the parts of a group that was cut
GROUPS_PER_WORKER = 4  # fewer groups than this per worker: the largest are cut, so that none waits idle


@dataclass(frozen=True)
class SweepTask:
    model: str  # what the row calls it: a stored model's id, or a file's name
    path: str  # the .onnx file
    strategy: str
    dims: tuple[tuple[str, int], ...]
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    time_limit: float | None = None
    name: str = ""  # how a person knows the model (a stored model's name); `model` when empty
    shapes: Shapes = ()  # whole input shapes bound at every point of the sweep (--shape)
    tile: str = "off"  # --tile: "auto" plans the model's tiled stages (`runtime.tiling`) when they pay
    tile_overhead: float = 0.2


@dataclass(frozen=True)
class SweepGroup:
    """The strategies of one (model, dims, memory options) combination: one Dask task, one load."""

    model: str
    path: str
    strategies: tuple[str, ...]
    dims: tuple[tuple[str, int], ...]
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    time_limit: float | None = None
    name: str = ""
    shapes: Shapes = ()
    tile: str = "off"
    tile_overhead: float = 0.2

    def tasks(self) -> list[SweepTask]:
        return [
            SweepTask(
                self.model,
                self.path,
                s,
                self.dims,
                self.memory,
                self.time_limit,
                self.name,
                self.shapes,
                self.tile,
                self.tile_overhead,
            )
            for s in self.strategies
        ]


def parse_dims_grid(text: str | None) -> list[dict[str, int]]:
    """'batch=1,8,32' -> [{'batch': 1}, {'batch': 8}, {'batch': 32}]; 'batch=1,8,seq=64,128' -> the
    four combinations. A value without a name belongs to the name before it."""
    values: dict[str, list[int]] = {}
    name = None
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        if "=" in part:
            name, _, part = (x.strip() for x in part.partition("="))
            if not name:
                raise InputError(f"--dims: {part!r} has no name; write name=value[,value...] (e.g. batch=1,8,32)")
            values.setdefault(name, [])
        if name is None:
            raise InputError(f"--dims: {part!r} has no name; write name=value[,value...] (e.g. batch=1,8,32)")
        try:
            number = int(part)
        except ValueError:
            raise InputError(f"--dims: {name}={part!r} is not a whole number") from None
        if number <= 0:
            raise InputError(f"--dims: {name} must be a positive size, got {number}")
        values[name].append(number)
    names = sorted(values)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(values[n] for n in names))]


def check_combinations(
    models: dict[str, tuple[str, list[str]]],
    strategies: list[str],
    grid: list[dict[str, int]],
    *,
    shapes: dict[str, list[int]] | None = None,
    inputs: dict[str, dict[str, list[Any] | None]] | None = None,
) -> None:
    """Refuse before any task runs: an unknown strategy, whole input shapes a model cannot take, or
    dims a model does not have or leaves unbound.

    `models` maps a model's name to (its file, its symbolic dims); `inputs`, needed with `shapes`,
    maps it to its declared inputs (input name -> dims). The names of dims on an input given a whole
    shape are bound by that shape, so no point of the grid needs them.
    """
    for strategy in strategies:
        planner.get(strategy)  # UnknownStrategyError lists the accepted names
    for name, (_, declared_dims) in models.items():
        symbolic = declared_dims
        if shapes:
            declared = {k: None if v is None else tuple(v) for k, v in (inputs or {}).get(name, {}).items()}
            try:
                check_shapes(declared, shapes)
            except runtime.ShapeError as e:
                raise InputError(f"shapes: model {name!r}: {e}") from None
            shaped = {d for n in shapes for d in (declared.get(n) or ()) if isinstance(d, str)}
            symbolic = [d for d in declared_dims if d not in shaped]
        for dims in grid:
            unknown = sorted(set(dims) - set(symbolic))
            missing = sorted(set(symbolic) - set(dims))
            if unknown:
                accepted = ", ".join(symbolic) or "none (every input dim is fixed)"
                raise InputError(
                    f"dims: model {name!r} has no symbolic dim {unknown[0]!r}; its symbolic dims are: {accepted}"
                )
            if missing:
                raise InputError(
                    f"dims: model {name!r} leaves {missing[0]!r} unbound; give it a value, e.g. {missing[0]}=1"
                )


def tasks_of(
    models: dict[str, str],
    strategies: list[str],
    grid: list[dict[str, int]],
    *,
    memory: MemoryOptions | None = None,
    time_limit: float | None = None,
    names: dict[str, str] | None = None,
    shapes: dict[str, list[int]] | None = None,
    tile: str = "off",
    tile_overhead: float = 0.2,
) -> list[SweepTask]:
    """One task per model x dims x strategy, in that order (a model's combinations run together);
    `shapes` (whole input shapes) hold at every point."""
    names = names or {}
    frozen = tuple(sorted((k, tuple(v)) for k, v in (shapes or {}).items()))
    return [
        SweepTask(
            model,
            path,
            strategy,
            tuple(sorted(dims.items())),
            memory or MemoryOptions(),
            time_limit,
            names.get(model, ""),
            frozen,
            tile,
            tile_overhead,
        )
        for model, path in models.items()
        for dims in (grid or [{}])
        for strategy in strategies
    ]


def groups_of(tasks: list[SweepTask], workers: int = 1) -> list[SweepGroup]:
    """The tasks as groups of one (model, dims, memory options, time limit) each, in the order of their
    first task, a group's strategies in task order. With fewer than GROUPS_PER_WORKER groups per worker,
    the group with the most strategies (the first of them) is cut in two until there are enough or
    every group holds one strategy: a cut group loads its model twice, an idle worker plans nothing."""
    grouped: dict[tuple[Any, ...], list[SweepTask]] = {}
    for task in tasks:
        key = (
            task.model, task.path, task.dims, task.memory, task.time_limit, task.name, task.shapes, task.tile,
            task.tile_overhead,
        )  # fmt: skip
        grouped.setdefault(key, []).append(task)
    groups = [
        SweepGroup(
            t[0].model,
            t[0].path,
            tuple(x.strategy for x in t),
            t[0].dims,
            t[0].memory,
            t[0].time_limit,
            t[0].name,
            t[0].shapes,
            t[0].tile,
            t[0].tile_overhead,
        )
        for t in grouped.values()
    ]
    while len(groups) < GROUPS_PER_WORKER * max(workers, 1):
        largest = max(range(len(groups)), key=lambda i: (len(groups[i].strategies), -i), default=None)
        if largest is None or len(groups[largest].strategies) < 2:
            break
        group = groups[largest]
        half = (len(group.strategies) + 1) // 2
        first, second = group.strategies[:half], group.strategies[half:]
        groups[largest : largest + 1] = [replace(group, strategies=first), replace(group, strategies=second)]
    return groups


def plan_group(group: SweepGroup) -> list[dict[str, Any]]:
    """Plan one combination with each of its strategies and check each plan; a row per strategy, in
    order, with `error` instead of figures for a strategy that failed (every one, if the model did)."""
    rows = [_row(task) for task in group.tasks()]
    try:
        problem, tiling = _problem(group.path, group.dims, group.memory, group.shapes, group.tile, group.tile_overhead)
    except (runtime.ModelError, planner.PlanningError, OSError, ValueError) as e:
        return [_failed(row, e) for row in rows]
    options = {"time_limit": group.time_limit} if group.time_limit is not None else {}
    out = []
    for row in rows:
        try:
            started = time.perf_counter()  # planning only: the model's load is shared by the strategies
            plan = planner.plan(problem, row["strategy"], **options)
            seconds = time.perf_counter() - started
            valid = planner.check_plan(problem, plan).ok
        except (runtime.ModelError, planner.PlanningError, OSError) as e:
            out.append(_failed(row, e))
            continue
        out.append(
            {
                **row,
                "arena_bytes": plan.arena_bytes,
                "lower_bound": plan.lower_bound,
                "valid": valid,
                "seconds": round(seconds, 6),
                "error": None,
                **({"tiling": tiling} if group.tile != "off" else {}),  # with --tile auto: null when untiled
            }
        )
    return out


def plan_task(task: SweepTask) -> dict[str, Any]:
    """Plan one combination and check the plan; a row, with `error` instead of figures when it fails."""
    group = SweepGroup(
        task.model, task.path, (task.strategy,), task.dims, task.memory, task.time_limit, task.name, task.shapes,
        task.tile, task.tile_overhead,
    )  # fmt: skip
    return plan_group(group)[0]


def _row(task: SweepTask) -> dict[str, Any]:
    row = {
        "model": task.model,
        "model_name": task.name or task.model,
        "strategy": task.strategy,
        "dims": dict(task.dims),
    }
    if task.shapes:
        row["shapes"] = {k: list(v) for k, v in task.shapes}
    return row


def _failed(row: dict[str, Any], error: Exception) -> dict[str, Any]:
    return {**row, "arena_bytes": None, "lower_bound": None, "valid": False, "seconds": 0.0, "error": str(error)}


@lru_cache(maxsize=PROBLEM_CACHE)
def _problem(
    path: str,
    dims: tuple[tuple[str, int], ...],
    memory: MemoryOptions,
    shapes: Shapes = (),
    tile: str = "off",
    tile_overhead: float = 0.2,
) -> tuple[planner.Problem, dict[str, Any] | None]:
    """The combination's problem, of its tiled graph with ``tile="auto"``, and its `tiling` field."""
    made = problem_of_model(Path(path), memory, dims=dict(dims), shapes={k: list(v) for k, v in shapes})
    tiling = tile_graph(made.graph, memory, tile=tile, overhead=tile_overhead)
    return tiled_problem(made.problem, tiling, memory), tiling.to_json() if tiling is not None else None


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV, ROW_FIELDS in order; a `shapes` column last when the sweep bound whole shapes."""
    shaped = any(row.get("shapes") for row in rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ROW_FIELDS + (("shapes",) if shaped else ()))
    for row in rows:
        dims = " ".join(f"{k}={v}" for k, v in sorted(row["dims"].items()))
        cells = [dims if key == "dims" else ("" if row.get(key) is None else row[key]) for key in ROW_FIELDS]
        if shaped:
            cells.append(" ".join(f"{k}={'x'.join(map(str, v))}" for k, v in sorted(row.get("shapes", {}).items())))
        writer.writerow(cells)
    return out.getvalue()


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in a stable order whatever order the workers finished in: model, dims, strategy."""
    return sorted(rows, key=lambda r: (r["model"], sorted(r["dims"].items()), r["strategy"]))


def heatmap(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Arena over LOAD per model x strategy, one panel per dims: what the sweep page draws."""
    panels: dict[str, dict[str, Any]] = {}
    for row in ordered(rows):
        label = " ".join(f"{k}={v}" for k, v in sorted(row["dims"].items())) or "as declared"
        panel = panels.setdefault(label, {"dims": row["dims"], "label": label, "cells": {}})
        ratio = planner.ratio(row["arena_bytes"], row["lower_bound"] or 0) if row["valid"] else None
        panel["cells"][(row["model"], row["strategy"])] = ratio
    out = []
    for panel in panels.values():
        models = sorted({m for m, _ in panel["cells"]})
        strategies = sorted({s for _, s in panel["cells"]})
        z = [[panel["cells"].get((m, s)) for s in strategies] for m in models]
        out.append({"dims": panel["dims"], "label": panel["label"], "models": models, "strategies": strategies, "z": z})
    return out


def task_json(task: SweepTask) -> dict[str, Any]:
    return {**asdict(task), "memory": task.memory.to_json(), "dims": dict(task.dims)}


# ---- sweeps over stored models, as a job (REST) -----------------------------------------------------


def start(
    storage: Storage,
    jobs: JobService,
    *,
    model_ids: list[str],
    strategies: list[str],
    grid: list[dict[str, int]],
    memory: MemoryOptions,
    max_tasks: int,
    shapes: dict[str, list[int]] | None = None,
) -> Job:
    """Check the sweep (unknown models, strategies, dims that do not bind: 422; over `max_tasks`: 429)
    and submit it as one job whose task fans the plan tasks out over every worker."""
    records = {}
    for model_id in model_ids:
        record = storage.get_model(model_id)
        if record is None:
            raise AppError(
                422, f"models: no model with id {model_id!r}; list them at /api/v1/models", title="Unknown model"
            )
        records[model_id] = record
    try:
        check_combinations(
            {i: ("", r.summary.get("symbolic_dims", [])) for i, r in records.items()},
            strategies,
            grid,
            shapes=shapes,
            inputs={
                i: {v["name"]: (list(v["dims"]) or None) for v in r.summary.get("inputs", [])}
                for i, r in records.items()
            },
        )
    except InputError as e:
        raise AppError(422, str(e), title="Invalid sweep") from None
    total = len(model_ids) * max(len(grid), 1) * len(strategies)
    if total > max_tasks:
        raise AppError(
            429,
            f"this sweep has {total:,} plan tasks, more than the {max_tasks:,} one sweep may queue "
            "(MEMPLAN_MAX_SWEEP_TASKS); split it into smaller sweeps",
            title="Sweep too large",
        )
    payload = {
        "models": model_ids,
        "strategies": strategies,
        "grid": grid,
        "memory": memory.to_json(),
        "shapes": shapes or {},
    }
    names = ", ".join(records[i].name for i in model_ids)
    title = f"sweep {names} over {len(strategies)} strategies and {max(len(grid), 1)} dims"
    return jobs.submit("sweep", title, sweep_job, payload, links={"page": "/sweeps/{id}", "api": "/api/v1/sweeps/{id}"})


def sweep_job(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """On a worker: resolve the models' files, then plan every combination on every worker of the cluster."""
    from distributed import as_completed, worker_client

    from app.services.library import model_path

    models, names = {}, {}
    for model_id in payload["models"]:
        record = ctx.storage.get_model(model_id)
        if record is None:
            raise JobFailed(f"model {model_id!r} was deleted before the sweep ran", 410)
        models[model_id] = str(model_path(ctx.storage, record))
        names[model_id] = record.name
    memory = MemoryOptions.from_json(payload["memory"])
    tasks = tasks_of(
        models, payload["strategies"], payload["grid"], memory=memory, names=names, shapes=payload.get("shapes")
    )
    total = len(tasks)
    rows: list[dict[str, Any]] = []
    ctx.report(0.0, f"{total} plan tasks")
    with worker_client() as client:  # secedes: this thread waits without holding the worker's slot
        futures = client.map(plan_group, groups_of(tasks, workers=len(client.nthreads())), pure=False)
        # Every row keeps its own progress event; they are written together, a batch at most every
        # PROGRESS_WRITE_S, not one database write per row.
        unsent: list[tuple[float, str, dict[str, Any]]] = []
        sent = time.monotonic()
        for future in as_completed(futures):
            for row in future.result():
                rows.append(row)
                unsent.append((len(rows) / total, f"{len(rows)} of {total} plans", {"row": row}))
            if len(rows) == total or time.monotonic() - sent >= PROGRESS_WRITE_S:
                ctx.report_many(unsent)
                unsent, sent = [], time.monotonic()
    return {"rows": ordered(rows), "total": total}


def report(jobs: JobService, job: Job) -> dict[str, Any]:
    """The sweep as `describe` puts it, reading the rows so far from its events while it runs."""
    events: list[dict[str, Any]] = []
    if job.result is None:
        while batch := jobs.events(job.id, after=events[-1]["seq"] if events else -1):
            events += batch
    return describe(job, events)


def describe(job: Job, events: list[dict[str, Any]]) -> dict[str, Any]:
    """GET /api/v1/sweeps/{id}: state, progress and the rows so far (all of them once it is done)."""
    if job.kind != "sweep":
        raise AppError(404, f"job {job.id!r} is a {job.kind} job, not a sweep; see /api/v1/jobs/{job.id}")
    if job.result is not None:
        rows = job.result["rows"]
        total = job.result["total"]
    else:
        rows = ordered([e["data"]["row"] for e in events if e["event"] == "progress" and "row" in e["data"]])
        total = None
    return {
        "id": job.id,
        "title": job.title,
        "state": job.state,
        "progress": job.progress,
        "message": job.message,
        "error": job.error,
        "total": total,
        "results": rows,
        "heatmap": heatmap(rows),
        "links": {
            "self": f"/api/v1/sweeps/{job.id}",
            "page": f"/sweeps/{job.id}",
            "csv": f"/api/v1/sweeps/{job.id}/results.csv",
            "events": f"/api/v1/jobs/{job.id}/events",
        },
    }
