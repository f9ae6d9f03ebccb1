"""tile and tile_overhead in REST plan and run bodies: the tiling searched in a job, answered and
stored, runs of a tiled plan execute its tiled stages and match the oracle, bad values refused
naming the field."""

from __future__ import annotations

import pytest

from runtime.training.models import mobilenet_v2_like
from tests.patience import JOB_SECONDS


def _upload(client) -> str:
    model = mobilenet_v2_like(size=64, width=0.35, classes=10)
    r = client.post("/api/v1/models", files={"file": ("cnn.onnx", model.SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _run(client, model_id: str, body: dict) -> dict:
    r = client.post(f"/api/v1/models/{model_id}/runs", json=body)
    assert r.status_code == 202, r.text
    assert client.app.state.jobs.wait(r.json()["id"], 240)
    return client.get(f"/api/v1/jobs/{r.json()['id']}").json()


def _plan_tiled(client, model_id: str, body: dict) -> dict:
    """POST a plan with tile auto: the request answers at once with the job searching the tiling;
    the job's result is what an inline plan answers, plus the page of its best plan."""
    r = client.post(f"/api/v1/models/{model_id}/plans", json=body | {"tile": "auto"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["plans"] == [] and answer["problem_id"] is None and answer["job"] is not None
    assert answer["links"]["job"] == f"/api/v1/jobs/{answer['job']['id']}"
    assert client.app.state.jobs.wait(answer["job"]["id"], JOB_SECONDS)
    job = client.get(answer["links"]["job"]).json()
    assert job["state"] == "done", job["error"]
    return job["result"]


def test_a_plan_with_tile_auto_answers_its_tiling_and_its_runs_execute_the_tiles(client):
    model_id = _upload(client)
    body = {"strategies": ["greedy_by_size"], "io": "external"}
    plain = client.post(f"/api/v1/models/{model_id}/plans", json=body).json()
    made = _plan_tiled(client, model_id, body)
    assert made["page"] == f"/plans/{made['plans'][0]['id']}"
    assert plain["tiling"] is None
    tiling = made["tiling"]
    assert tiling is not None, made.get("tiling_note")
    assert set(tiling) == {"stages", "extra_macs", "arena_bytes_untiled", "curve"}
    assert made["plans"][0]["arena_bytes"] < plain["plans"][0]["arena_bytes"]
    assert tiling["arena_bytes_untiled"] == plain["plans"][0]["arena_bytes"]
    job = _run(client, model_id, {"plan_id": made["plans"][0]["id"], "seed": 1, "canary": True})
    assert job["state"] == "done", job["error"]
    assert job["result"]["verdict"]["passed"] is True
    steps = [s["name"] for s in job["result"]["steps"]]
    assert any("@" in name for name in steps)  # the bands ran, each node of the head once per band
    fresh = _run(client, model_id, {"strategy": "greedy_by_size", "tile": "auto", "io": "external"})
    assert fresh["state"] == "done", fresh["error"]
    assert fresh["result"]["verdict"]["passed"] is True
    assert fresh["result"]["arena_bytes"] == made["plans"][0]["arena_bytes"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tile": "on"}, "tile"),
        ({"tile": "auto", "tile_overhead": -1}, "tile_overhead"),
        ({"tile": "auto", "tile_slack": -0.5}, "tile_slack"),
    ],
)
@pytest.mark.parametrize("what", ["plans", "runs"])
def test_bad_tile_values_are_422_naming_the_field(client, body, field, what):
    model_id = _upload(client)
    r = client.post(f"/api/v1/models/{model_id}/{what}", json=body)
    assert r.status_code == 422, r.text
    assert field in r.text


def test_the_plan_page_shows_the_tiled_stage_and_its_curve(client):
    model_id = _upload(client)
    made = _plan_tiled(client, model_id, {"strategies": ["greedy_by_size"], "io": "external"})
    plan_id = made["plans"][0]["id"]
    page = client.get(f"/plans/{plan_id}")
    assert page.status_code == 200
    assert 'id="tiling"' in page.text and page.text.count('class="tiling-point"') == len(made["tiling"]["curve"])
    assert f"{made['tiling']['arena_bytes_untiled']:,} bytes" in page.text
    twin = client.get(f"/plans/{plan_id}?format=json").json()
    assert twin["problem"]["options"]["tiling"] == made["tiling"]
    steps = twin["view"]["step_names"]
    assert any("@" in s for s in steps)  # the bands are steps of the charts


def test_a_plan_with_tile_auto_refuses_a_bad_request_itself_before_any_job(client):
    model_id = _upload(client)
    storage, every = client.app.state.jobs.storage, ("queued", "running", "done", "failed", "cancelled", "interrupted")
    before = storage.count_jobs(every)
    r = client.post(f"/api/v1/models/{model_id}/plans", json={"tile": "auto", "dims": {"nonexistent": 3}})
    assert r.status_code == 422, r.text
    assert "nonexistent" in r.text
    assert storage.count_jobs(every) == before


def test_the_model_page_form_offers_tiling(client):
    page = client.get(f"/models/{_upload(client)}")
    assert page.status_code == 200
    assert 'name="tile"' in page.text and 'name="tile_overhead"' in page.text
