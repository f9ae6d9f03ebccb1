"""REST training bodies take `remat` and `remat_overhead`; answers carry `remat`.

Oracles: the step rebuilt here, rematerialized with the tensors the answer names and planned
directly; the demo's losses without recomputation, which recomputation must not change."""

from __future__ import annotations

import pytest

from planner import Plan, Problem, check_plan
from runtime.training import build_training_step, plan_categories, training_problem
from runtime.training import models as training_models
from runtime.training.remat import rematerialize


@pytest.fixture()
def encoder(client):
    model = training_models.transformer_encoder(batch=2, tokens=4, features=8, heads=2, layers=2, classes=3)
    r = client.post("/api/v1/models", files={"file": ("encoder.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"], model


def test_training_plan_with_remat_stores_the_plan_of_the_recomputed_step(client, encoder):
    model_id, proto = encoder
    r = client.post(f"/api/v1/models/{model_id}/training-plans", json={"remat": "auto", "remat_overhead": 0.3})
    assert r.status_code == 201, r.text
    out = r.json()
    remat = out["remat"]
    assert remat["recomputed"] and remat["arena_bytes"] < remat["arena_bytes_without"] and remat["budget_met"]
    step = rematerialize(build_training_step(proto, recompute=False), remat["recomputed"])
    direct = plan_categories(training_problem(step), "greedy_by_size")
    assert out["unified_bytes"] == remat["arena_bytes"] == direct.unified.arena_bytes
    problem = Problem.from_json(client.get(f"/api/v1/problems/{out['problem_id']}").json()["problem"])
    plan = Plan.from_json(client.app.state.storage.get_plan(out["plan_id"]).plan)
    assert check_plan(problem, plan).ok and plan.arena_bytes == remat["arena_bytes"]
    below = client.post(f"/api/v1/models/{model_id}/training-plans", json={"remat": "10%"}).json()["remat"]
    assert below["budget_met"] is False and below["arena_bytes"] <= remat["arena_bytes"]
    assert "remat" not in client.post(f"/api/v1/models/{model_id}/training-plans", json={}).json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"remat": "-3"}, "remat"),
        ({"remat": "plenty"}, "remat"),
        ({"remat": "auto", "remat_overhead": -0.5}, "remat_overhead"),
        ({"remat": "auto", "remat_overhead": "lots"}, "remat_overhead"),
    ],
)
def test_bad_remat_fields_are_422_naming_the_field(client, encoder, body, field):
    for url in (f"/api/v1/models/{encoder[0]}/training-plans", "/api/v1/training/demo"):
        r = client.post(url, json=body)
        assert r.status_code == 422, r.text
        assert field in r.json()["detail"], r.json()


def _demo(client, **body):
    r = client.post("/api/v1/training/demo", json={"model": "cnn", "steps": 3, "batch": 8, **body})
    assert r.status_code == 202, r.text
    assert client.app.state.jobs.wait(r.json()["id"], 180)
    job = client.get(f"/api/v1/jobs/{r.json()['id']}").json()
    assert job["state"] == "done", job.get("error")
    return {**job["result"], "id": job["id"]}


def test_training_demo_with_remat_runs_the_same_steps_in_a_smaller_arena(client):
    plain = _demo(client)
    again = _demo(client, remat="auto", remat_overhead=0.5, canary=True)
    assert again["losses"] == plain["losses"]
    remat = again["remat"]
    assert remat["recomputed"] and again["arena_bytes"] == remat["arena_bytes"] < remat["arena_bytes_without"]
    assert again["verdict"]["passed"]
    # The page draws the curve and the chosen point from the result it embeds, and names what was recomputed.
    page = client.get(f"/training/demo/{again['id']}").text
    assert 'id="chart-remat"' in page and all(name in page for name in remat["recomputed"])
    assert 'id="chart-remat"' not in client.get(f"/training/demo/{plain['id']}").text
    twin = client.get(f"/training/demo/{again['id']}", params={"format": "json"}).json()
    assert twin["job"]["result"]["remat"] == remat
