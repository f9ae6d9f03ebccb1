"""The service's memory API: zero-copy runs, pipelines of two stored models, parameters shared by content.

Oracles: pipeline outputs against onnxruntime running each model alone (chained), plans through
`planner.check_plan`, the joint arena against the models planned alone, shared bytes against the
embedding's own size.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from planner import Plan, Problem, check_plan
from tests import memory_models
from tests.patience import JOB_SECONDS

PROBLEM_JSON = "application/problem+json"


def _upload(client: TestClient, model, name: str) -> str:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _finished(client: TestClient, job: dict) -> dict:
    assert client.app.state.jobs.wait(job["id"], JOB_SECONDS)
    done = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert done["state"] == "done", done
    return done["result"]


@pytest.fixture()
def two_mlps(client):
    first = _upload(client, memory_models.mlp(features=32, hidden=64, classes=16, seed=1), "first")
    second = _upload(client, memory_models.mlp(features=16, hidden=48, classes=10, seed=2), "second")
    return first, second


def _pipeline(client, first, second, **extra):
    body = {
        "models": {"a": first, "b": second},
        "connections": {"a:y": "b:x"},
        "dims": {"a": {"N": 4}, "b": {"N": 4}},
        **extra,
    }
    return client.post("/api/v1/pipelines", json=body)


def test_pipeline_plan_is_one_checked_arena_no_larger_than_the_separate_ones(client, two_mlps):
    r = _pipeline(client, *two_mlps)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["valid"] and set(out["separate_arena_bytes"]) == {"a", "b"}
    assert out["joint_arena_bytes"] <= out["separate_total_bytes"]
    assert out["saved_bytes"] == out["separate_total_bytes"] - out["joint_arena_bytes"]
    doc = client.get(f"/api/v1/problems/{out['id']}").json()
    problem = Problem.from_json(doc["problem"])
    plan = Plan.from_json(_plan(client, out))
    assert check_plan(problem, plan).ok
    assert plan.arena_bytes == out["joint_arena_bytes"]
    # The connected tensor is one buffer, named after its producer.
    assert "a:y" in {b.id for b in problem.buffers} and "b:x" not in {b.id for b in problem.buffers}
    assert client.get(f"/api/v1/pipelines/{out['id']}").json() == out
    page = client.get(f"/pipelines/{out['id']}", params={"format": "json"}).json()
    assert page["page"] == "pipeline" and page["pipeline"] == out
    assert client.get(f"/pipelines/{out['id']}").status_code == 200
    assert client.get(f"/plans/{out['plan_id']}").status_code == 200


def _plan(client, out) -> dict:
    stored = client.app.state.storage.get_plan(out["plan_id"])
    return stored.plan


@pytest.mark.parametrize("io,zero_copy", [("external", True), ("arena", False)])
def test_pipeline_run_matches_the_models_chained_through_onnxruntime(client, two_mlps, io, zero_copy):
    out = _pipeline(client, *two_mlps, io=io).json()
    job = client.post(f"/api/v1/pipelines/{out['id']}/runs", json={"zero_copy": zero_copy, "seed": 3}).json()
    result = _finished(client, job)
    assert result["verdict"]["passed"] is True and result["verdict"]["oracle"].startswith("onnxruntime")
    assert [o["name"] for o in result["outputs"]] == ["b:y"]
    # Bytes beside the arena come from a traced run of their own (the timed run is not traced).
    assert isinstance(result["stats"]["outside_arena_bytes"], int) and result["stats"]["outside_arena_bytes"] >= 0
    if zero_copy:
        assert result["copies"] == 0 and result["copied_bytes"] == 0 and result["fallbacks"] == {}
    else:  # the input is copied into the arena and the output out of it
        assert result["copies"] == 2 and result["copied_bytes"] == 4 * 32 * 4 + 4 * 10 * 4
    page = client.get(f"/runs/{job['id']}", params={"format": "json"}).json()
    assert page["result"]["pipeline_id"] == out["id"]
    # Its page draws the joint plan it ran in, on the step axis of the run's measured steps.
    joint = _plan(client, out)
    assert (
        page["view"]["selected"] == out["plan_id"] and page["view"]["plans"][0]["arena_bytes"] == joint["arena_bytes"]
    )
    assert {s["step"] for s in result["steps"]} <= set(range(page["view"]["steps"]))


def test_pipeline_with_run_flag_starts_a_job(client, two_mlps):
    out = _pipeline(client, *two_mlps, run=True).json()
    assert out["job"]["kind"] == "run"
    assert _finished(client, out["job"])["verdict"]["passed"] is True


def test_pipeline_errors_name_the_field(client, two_mlps):
    first, second = two_mlps
    r = client.post(
        "/api/v1/pipelines",
        json={
            "models": {"a": first, "b": second},
            "connections": {"a:nope": "b:x"},
            "dims": {"a": {"N": 1}, "b": {"N": 1}},
        },
    )
    assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM_JSON)
    assert "'nope' is not one of model 'a'" in r.json()["detail"]
    r = client.post("/api/v1/pipelines", json={"models": {"a": first, "b": "missing"}})
    assert r.status_code == 404 and "models.b" in r.json()["detail"]
    r = client.post("/api/v1/pipelines", json={"models": {"a": first}, "dims": {"z": {"N": 1}}})
    assert r.status_code == 422 and "'z' is not a model of the pipeline" in r.json()["detail"]
    r = _pipeline(client, *two_mlps, strategy="nope")
    assert r.status_code == 422 and "unknown strategy 'nope'" in r.json()["detail"]
    mismatched = client.post(
        "/api/v1/pipelines",
        json={
            "models": {"a": first, "b": second},
            "connections": {"a:y": "b:x"},
            "dims": {"a": {"N": 2}, "b": {"N": 3}},
        },
    )
    assert mismatched.status_code == 422 and "same dtype and shape" in mismatched.json()["detail"]
    assert client.get("/api/v1/pipelines/nothing").status_code == 404
    assert client.post("/api/v1/pipelines/nothing/runs", json={}).status_code == 404


def test_model_run_zero_copy_has_no_copies_and_the_default_copies_in_and_out(client, two_mlps):
    first, _ = two_mlps
    zero = client.post(f"/api/v1/models/{first}/runs", json={"dims": {"N": 2}, "zero_copy": True}).json()
    copied = client.post(f"/api/v1/models/{first}/runs", json={"dims": {"N": 2}}).json()
    zero, copied = _finished(client, zero), _finished(client, copied)
    assert zero["verdict"]["passed"] and copied["verdict"]["passed"]
    assert (zero["copies"], zero["copied_bytes"], zero["fallbacks"]) == (0, 0, {})
    assert zero["options"]["io"] == "external" and zero["options"]["zero_copy"] is True
    assert copied["copies"] == 2 and copied["copied_bytes"] == 2 * 32 * 4 + 2 * 16 * 4
    assert copied["rerun"]["url"] == f"/api/v1/models/{first}/runs"
    # Zero-copy asked of a plan with inputs inside the arena: copied, and the run says why.
    plans = client.post(f"/api/v1/models/{first}/plans", json={"strategies": ["bump"], "dims": {"N": 2}}).json()
    job = client.post(
        f"/api/v1/models/{first}/runs", json={"plan_id": plans["plans"][0]["id"], "zero_copy": True}
    ).json()
    fallback = _finished(client, job)
    assert fallback["copies"] == 2 and set(fallback["fallbacks"]) == {"x", "y"}
    assert "io='arena'" in fallback["fallbacks"]["x"]
    page = client.get(f"/runs/{job['id']}")
    assert "copied because" in page.text and 'id="rerun-form"' in page.text


def test_model_page_shows_parameter_bytes_shared_with_other_models(client):
    vocab, hidden = 300, 16
    step = _upload(client, memory_models.rnn_step(vocab, hidden), "step")
    output = _upload(client, memory_models.rnn_output(vocab, hidden), "output")
    alone = _upload(client, memory_models.mlp(seed=5), "alone")
    embedding = vocab * hidden * 4  # the only parameter the two cut models have in common
    page = client.get(f"/models/{output}", params={"format": "json"}).json()["parameters"]
    assert page["available"] and page["parameter_bytes"] == embedding
    assert page["shared_with_others_bytes"] == embedding
    assert page["shared_with"] == [{"id": step, "name": "step", "shared_bytes": embedding}]
    assert page["models_compared"] == 2
    lonely = client.get(f"/models/{alone}", params={"format": "json"}).json()["parameters"]
    assert lonely["shared_with_others_bytes"] == 0 and lonely["shared_with"] == []
    assert "shared with other stored models" in client.get(f"/models/{output}").text
