"""The pipeline service on the real app's storage: the arenas it sets the joint plan against are
each model planned alone by the runtime and planner directly (here), the joint plan passes the
independent checker, and a connection naming what no model has is a 422 naming the field."""

from __future__ import annotations

import pytest

import planner
import runtime
from app.errors import AppError
from app.schemas import PipelineRequest
from app.services import pipelines
from planner import Plan, Problem, check_plan
from tests.memory_models import mlp, save


@pytest.fixture()
def stored(client, tmp_path):
    ids, paths = {}, {}
    for name, model in (("a", mlp(features=32, hidden=64, classes=16, seed=1)), ("b", mlp(16, 48, 10, seed=2))):
        paths[name] = save(model, tmp_path / f"{name}.onnx")
        r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", paths[name].read_bytes())})
        assert r.status_code == 201, r.text
        ids[name] = r.json()["id"]
    return ids, paths


def test_the_joint_plan_is_checked_and_set_against_each_model_alone(client, stored):
    ids, paths = stored
    storage, jobs = client.app.state.storage, client.app.state.jobs
    body = PipelineRequest(models=ids, connections={"a:y": "b:x"}, dims={"a": {"N": 4}, "b": {"N": 4}})
    out = pipelines.plan_pipeline(storage, jobs, body)
    memory = body.memory()
    alone = {
        name: planner.plan(runtime.memory_problem(runtime.load_model(path, dims={"N": 4}), memory), body.strategy)
        for name, path in paths.items()
    }
    assert out["separate_arena_bytes"] == {name: plan.arena_bytes for name, plan in alone.items()}
    assert out["separate_total_bytes"] == sum(p.arena_bytes for p in alone.values())
    record = storage.get_plan(out["plan_id"])
    problem = Problem.from_json(storage.get_problem(out["id"]).problem)
    assert check_plan(problem, Plan.from_json(record.plan)).ok and out["joint_arena_bytes"] == record.arena_bytes
    assert pipelines.describe(storage, out["id"]) == {k: v for k, v in out.items() if k != "run"}


def test_a_connection_to_nothing_is_refused_naming_the_field(client, stored):
    ids, _ = stored
    storage, jobs = client.app.state.storage, client.app.state.jobs
    body = PipelineRequest(models=ids, connections={"a:nope": "b:x"}, dims={"a": {"N": 4}, "b": {"N": 4}})
    with pytest.raises(AppError) as caught:
        pipelines.plan_pipeline(storage, jobs, body)
    assert (
        caught.value.status == 422 and caught.value.detail.startswith("connections") and "nope" in caught.value.detail
    )
