"""Pipeline runs followed on the pipeline's page: the page carries its joint plan's chart, a run
reports every step of the joint schedule with its time (canary on: every step checked), and a run's
page under way carries the plan it runs in. Oracles: the stored Plan JSON and problem, onnxruntime
running each model alone (the chained verdict)."""

from __future__ import annotations

from app.services.run_views import running_plan_view
from planner import Plan, Problem
from tests import memory_models
from tests.patience import JOB_SECONDS


def _pipeline(client) -> dict:
    ids = []
    for name, model in (
        ("first", memory_models.mlp(features=32, hidden=64, classes=16, seed=1)),
        ("second", memory_models.mlp(features=16, hidden=48, classes=10, seed=2)),
    ):
        r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    body = {"models": {"a": ids[0], "b": ids[1]}, "connections": {"a:y": "b:x"}, "dims": {"a": {"N": 4}, "b": {"N": 4}}}
    r = client.post("/api/v1/pipelines", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def test_a_pipeline_page_carries_the_chart_of_its_joint_plan(client):
    out = _pipeline(client)
    page = client.get(f"/pipelines/{out['id']}", headers={"accept": "application/json"}).json()
    view = page["view"]
    storage = client.app.state.storage
    plan = Plan.from_json(storage.get_plan(out["plan_id"]).plan)
    problem = Problem.from_json(storage.get_problem(out["id"]).problem)
    assert view["selected"] == out["plan_id"] and view["steps"] == problem.steps
    assert view["buffers"]["id"] == [b.id for b in problem.buffers]
    placed = [plan.offsets[b.id].offset if b.id in plan.offsets else None for b in problem.buffers]
    assert view["offsets"][out["plan_id"]] == placed
    assert view["plans"][0]["arena_bytes"] == plan.arena_bytes == out["joint_arena_bytes"]


def test_a_pipeline_run_with_the_canary_reports_every_step_of_the_joint_schedule(client):
    out = _pipeline(client)
    r = client.post(f"/api/v1/pipelines/{out['id']}/runs", json={"canary": True, "seed": 1})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job["error"]
    result = job["result"]
    assert result["verdict"]["passed"] is True and result["verdict"]["oracle"].startswith("onnxruntime")
    assert result["canary"] is True and result["rerun"]["body"]["canary"] is True
    steps = client.get(f"/pipelines/{out['id']}", headers={"accept": "application/json"}).json()["view"]["steps"]
    assert [s["step"] for s in result["steps"]] == list(range(steps))  # the plan's step axis, every step timed
    events = [e for e in client.get(f"/api/v1/jobs/{job_id}/events").text.split("\n\n") if "event: progress" in e]
    assert sum('"step"' in e for e in events) == steps  # one event per step: the page's cursor follows them


def test_a_run_under_way_is_drawn_on_the_plan_it_runs_in(client):
    out = _pipeline(client)
    storage = client.app.state.storage
    links = {"plan": f"/plans/{out['plan_id']}"}
    view = running_plan_view(storage, {"state": "running", "links": links})
    assert view is not None and view["selected"] == out["plan_id"]
    assert running_plan_view(storage, {"state": "queued", "links": links})["selected"] == out["plan_id"]
    # Finished runs draw the plan from their result; a job without a plan link has nothing to follow.
    assert running_plan_view(storage, {"state": "done", "links": links}) is None
    assert running_plan_view(storage, {"state": "running", "links": {"page": "/runs/x"}}) is None
    assert running_plan_view(storage, {"state": "running", "links": {"plan": "/plans/no-such-plan"}}) is None
