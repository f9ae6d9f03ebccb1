"""Sweep tasks grouped per (model, dims, memory options): one load, every strategy's row as before."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import runtime
from app.jobs import JobCancelled, JobContext
from app.services.sweeps import GROUPS_PER_WORKER, SweepGroup, groups_of, plan_group, plan_task, tasks_of
from app.storage import Storage
from planner import load
from runtime import MemoryOptions
from tests.cli.test_sweep import batched_mlp

STRATEGIES = ["greedy_by_size", "naive", "best_fit"]


@pytest.fixture()
def models(tmp_path) -> dict[str, str]:
    paths = {}
    for name, hidden in (("small", 16), ("wide", 48)):
        onnx.save(batched_mlp(hidden), tmp_path / f"{name}.onnx")
        paths[name] = str(tmp_path / f"{name}.onnx")
    return paths


def test_groups_hold_one_combination_each_in_the_order_of_the_tasks(models):
    grid = [{"batch": 1}, {"batch": 4}]
    memories = [MemoryOptions(), MemoryOptions(inplace=False)]
    tasks = [t for m in memories for t in tasks_of(models, STRATEGIES, grid, memory=m)]
    groups = groups_of(tasks, workers=1)
    assert len(groups) == 2 * 2 * 2 >= GROUPS_PER_WORKER
    assert [(g.memory, g.model, g.dims) for g in groups] == [
        (m, name, (("batch", b),)) for m in memories for name in models for b in (1, 4)
    ]
    assert all(g.strategies == tuple(STRATEGIES) for g in groups)
    assert [t for g in groups for t in g.tasks()] == tasks  # the tasks of one combination were together already


def test_a_sweep_of_few_combinations_is_cut_so_that_every_worker_has_some(models):
    strategies = [*STRATEGIES, "bump", "first_fit", "wic", "hill_climb", "greedy_by_breadth", "greedy_by_conflicts"]
    tasks = tasks_of({"small": models["small"]}, strategies, [{"batch": 1}])
    groups = groups_of(tasks, workers=2)
    assert len(groups) == 2 * GROUPS_PER_WORKER
    assert [s for g in groups for s in g.strategies] == strategies  # every strategy once, in order
    assert all(g.strategies for g in groups)
    singles = groups_of(tasks[:3], workers=2)  # fewer strategies than wanted groups: one each
    assert [g.strategies for g in singles] == [(s,) for s in STRATEGIES]


def test_a_groups_rows_are_the_rows_of_its_tasks_planned_one_by_one(models):
    tasks = tasks_of(models, STRATEGIES, [{"batch": 2}])
    rows = [row for group in groups_of(tasks) for row in plan_group(group)]
    alone = [plan_task(t) for t in tasks]
    without_time = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert [without_time(r) for r in rows] == [without_time(r) for r in alone]
    for row in rows:
        graph = runtime.load_model(Path(models[row["model"]]), dims=row["dims"])
        assert row["lower_bound"] == load(runtime.memory_problem(graph))  # LOAD, from an independent load
        assert row["valid"] and row["arena_bytes"] >= row["lower_bound"] and row["error"] is None
        assert row.keys() == {
            "model",
            "model_name",
            "strategy",
            "dims",
            "arena_bytes",
            "lower_bound",
            "valid",
            "seconds",
            "error",
        }


def test_a_model_that_does_not_load_fails_each_row_of_its_group_with_the_reason(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    rows = plan_group(SweepGroup("broken", str(broken), tuple(STRATEGIES), ()))
    assert [r["strategy"] for r in rows] == STRATEGIES
    assert all(r["arena_bytes"] is None and not r["valid"] and r["error"] for r in rows)


def test_report_many_writes_the_events_report_would_write_one_by_one(tmp_path):
    storage = Storage(tmp_path / "data")
    try:
        for job_id in ("one", "many"):
            storage.create_job(job_id=job_id, kind="sweep", title="t", links={}, created=0.0)
        reports = [(k / 4, f"{k} of 4 plans", {"row": {"k": k}}) for k in range(1, 5)]
        one, many = JobContext("one", storage), JobContext("many", storage)
        for progress, message, data in reports:
            one.report(progress, message, **data)
        many.report_many(reports)
        assert storage.job_events("many") == storage.job_events("one")
        assert [e["data"]["row"]["k"] for e in storage.job_events("many")] == [1, 2, 3, 4]
        assert (many.progress, many.message) == (1.0, "4 of 4 plans")
        assert storage.get_job("many").progress == 1.0  # the first write of a context is never held back
        storage.request_cancel("many")
        later = JobContext("many", storage)
        with pytest.raises(JobCancelled):
            later.report_many(reports)
        assert len(storage.job_events("many")) == 4  # nothing written once cancelled
    finally:
        storage.close()
