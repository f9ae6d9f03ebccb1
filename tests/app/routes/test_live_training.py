"""The training demo followed on its page: the unified plan stored before the first step (its event
comes first, and the page of a demo under way carries its chart), every node of the followed
training steps reported on the plan's step axis with what it wrote and its time, the canary on
request, and a verdict whose oracle is onnx.reference's loss. Oracles: the stored Plan JSON and
problem through `planner.check_plan`, the step's graph (`runtime.training`), onnx.reference."""

from __future__ import annotations

import dataclasses
import json

from app.services import training
from planner import Plan, Problem, check_plan
from tests.patience import JOB_SECONDS


def _events(client, job_id: str) -> list[dict]:
    out, event = [], None
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "progress":
                out.append(json.loads(line[6:]))
    return out


def test_a_demo_reports_its_plan_first_then_every_node_with_the_canary_and_a_verdict(client):
    steps = 4
    r = client.post("/api/v1/training/demo", json={"model": "mlp", "steps": steps, "batch": 8, "canary": True})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "done", job["error"]
    result = job["result"]
    events = _events(client, job_id)
    planned = [i for i, e in enumerate(events) if "plan_id" in e]
    nodes = [e for e in events if "step" in e]
    assert len(planned) == 1 and planned[0] < events.index(nodes[0])  # the chart can be drawn before any node
    assert events[planned[0]]["plan_id"] == result["plan_id"]
    storage = client.app.state.storage
    problem = Problem.from_json(storage.get_problem(result["problem_id"]).problem)
    plan = Plan.from_json(storage.get_plan(result["plan_id"]).plan)
    assert check_plan(problem, plan).ok and result["arena_bytes"] == plan.arena_bytes == result["unified_bytes"]
    # A few steps: every node of every training step, in order, on the plan's step axis.
    expected = [(t, s) for t in range(steps) for s in range(problem.steps)]
    assert [(e["train_step"], e["step"]) for e in nodes] == expected
    for e in nodes:
        assert e["op"] == problem.step_names[e["step"]] and e["seconds"] >= 0
        assert all(problem.buffer(w).first == e["step"] for w in e["writes"] if problem.buffer(w).alias_of is None)
    losses = [e["loss"] for e in events if "loss" in e]
    assert losses == result["losses"] and all("step" not in e for e in events if "loss" in e)
    verdict = result["verdict"]
    assert verdict["oracle"] == "onnx.reference" and verdict["passed"] is True and result["canary"] is True
    assert abs(verdict["reference_loss"] - losses[0]) <= 1e-4 * abs(losses[0])
    assert result["seconds"] > 0 and [s["step"] for s in result["steps"]] == list(range(problem.steps))
    page = client.get(f"/training/demo/{job_id}", params={"format": "json"}).json()
    assert page["view"]["selected"] == result["plan_id"]
    html = client.get(f"/training/demo/{job_id}").text
    assert 'id="verdict"' in html and "onnx.reference" in html and "canary" in html
    # Under way, the page draws the plan the demo stored before training (from the job's events).
    record = client.app.state.jobs.get(job_id)
    running = training.planned_view(storage, dataclasses.replace(record, state="running"))
    assert running is not None and running["selected"] == result["plan_id"] and running["steps"] == problem.steps
    assert training.planned_view(storage, record) is None  # a finished demo draws its result's plan
    hit = {"step": 3, "node": "n", "tensors": []}
    stopped = dataclasses.replace(record, state="failed", error={"detail": "canary", "canary": hit})
    assert training.planned_view(storage, stopped)["selected"] == result["plan_id"]  # where the canary stopped it
    assert training.planned_view(storage, dataclasses.replace(stopped, error={"detail": "other"})) is None


def test_a_long_demo_reports_every_nth_step_node_by_node_within_the_budget(client):
    steps = 400  # x 18 nodes: more node events than the budget
    r = client.post("/api/v1/training/demo", json={"model": "mlp", "steps": steps, "batch": 8})
    job_id = r.json()["id"]
    assert client.app.state.jobs.wait(job_id, JOB_SECONDS)
    result = client.get(f"/api/v1/jobs/{job_id}").json()["result"]
    assert result["verdict"]["passed"] is True and result["canary"] is False
    nodes = [e for e in _events(client, job_id) if "step" in e]
    total = len(result["steps"])
    every = -(-steps * total // training.MAX_NODE_EVENTS)
    assert every > 1 and len(nodes) <= training.MAX_NODE_EVENTS + total
    followed = sorted({e["train_step"] for e in nodes})
    assert followed == sorted({*range(0, steps, every), steps - 1}) and len(nodes) == len(followed) * total


def test_a_verdict_fails_when_the_first_loss_is_not_the_oracles_or_the_loss_does_not_fall():
    assert training.verdict([2.5, 1.0], 2.5)["passed"] is True
    assert training.verdict([2.5, 1.0], 2.6)["passed"] is False
    rising = training.verdict([1.0, 2.0, 3.0, 4.0], 1.0)
    assert rising["passed"] is False and rising["loss_fell"] is False and "did not fall" in rising["summary"]
    assert training.verdict([2.5], 2.5) == {**training.verdict([2.5], 2.5), "passed": True, "loss_fell": None}
