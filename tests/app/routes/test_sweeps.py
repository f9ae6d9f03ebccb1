"""Sweeps over stored models through the real app and a real Dask cluster of worker processes."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient

import runtime
from planner import load
from tests.cli.test_sweep import batched_mlp
from tests.patience import JOB_SECONDS


def _upload(client, hidden: int, name: str) -> str:
    r = client.post("/api/v1/models", files={"file": (f"{name}.onnx", batched_mlp(hidden).SerializeToString())})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _finished(client, sweep_id: str, timeout: float = JOB_SECONDS) -> dict:
    assert client.app.state.jobs.wait(sweep_id, timeout), f"sweep {sweep_id} did not finish in {timeout} s"
    return client.get(f"/api/v1/sweeps/{sweep_id}").json()


def test_a_sweep_plans_every_combination_on_the_workers(client, app):
    small, wide = _upload(client, 16, "small"), _upload(client, 48, "wide")
    body = {"models": [small, wide], "strategies": ["greedy_by_size", "naive"], "dims": [{"batch": 1}, {"batch": 4}]}
    r = client.post("/api/v1/sweeps", json=body)
    assert r.status_code == 202, r.text
    sweep = _finished(client, r.json()["id"])
    assert sweep["state"] == "done", sweep["error"]
    rows = sweep["results"]
    assert {(row["model"], row["strategy"], row["dims"]["batch"]) for row in rows} == {
        (m, s, b) for m in (small, wide) for s in ("greedy_by_size", "naive") for b in (1, 4)
    }
    for row in rows:
        assert row.keys() >= {"model", "strategy", "dims", "arena_bytes", "lower_bound", "valid", "seconds"}
        record = app.state.storage.get_model(row["model"])
        path = app.state.storage.model_file(record)
        assert row["lower_bound"] == load(runtime.memory_problem(runtime.load_model(path, dims=row["dims"])))
        assert row["valid"] and row["arena_bytes"] >= row["lower_bound"]
    panels = {p["label"]: p for p in sweep["heatmap"]}
    assert set(panels) == {"batch=1", "batch=4"} and sorted(panels["batch=1"]["models"]) == sorted([small, wide])
    written = list(csv.DictReader(io.StringIO(client.get(sweep["links"]["csv"]).text)))
    assert len(written) == len(rows)
    page = client.get(f"/sweeps/{sweep['id']}?format=json").json()
    assert page["page"] == "sweep" and page["sweep"]["results"] == rows
    # One progress event per row, as listeners have always had them (written in batches).
    events = app.state.storage.job_events(sweep["id"])
    assert [e["seq"] for e in events] == list(range(len(events)))
    rows_seen = [e["data"] for e in events if e["event"] == "progress" and "row" in e["data"]]
    assert len(rows_seen) == len(rows) == 8
    assert [(d["progress"], d["message"]) for d in rows_seen] == [(k / 8, f"{k} of 8 plans") for k in range(1, 9)]
    as_text = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
    assert sorted(as_text(d["row"]) for d in rows_seen) == sorted(as_text(r) for r in rows)
    assert [e["event"] for e in events][-1] == "done"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"models": ["nope"]}, "no model with id 'nope'"),
        ({"strategies": ["fastest"]}, "unknown strategy 'fastest'"),
        ({"dims": [{"seq": 4}]}, "has no symbolic dim 'seq'"),
        ({"dims": [{}]}, "leaves 'batch' unbound"),
        ({"dims": [{"batch": 0}]}, "must be a positive size"),
    ],
)
def test_a_bad_sweep_is_422_before_any_task(client, body, message):
    model = _upload(client, 16, "small")
    r = client.post("/api/v1/sweeps", json={"models": [model], "strategies": ["naive"], **body})
    assert r.status_code == 422 and message in r.json()["detail"], r.text
    assert client.app.state.storage.count_jobs(("queued", "running", "done", "failed")) == 0


def test_a_sweep_over_the_task_limit_is_429(make_app):
    with TestClient(make_app(max_sweep_tasks=3)) as client:
        model = _upload(client, 16, "small")
        r = client.post(
            "/api/v1/sweeps",
            json={"models": [model], "strategies": ["naive", "bump"], "dims": [{"batch": 1}, {"batch": 2}]},
        )
        assert r.status_code == 429 and "4 plan tasks" in r.json()["detail"]


def test_a_sweep_binds_whole_input_shapes_and_refuses_ones_the_model_cannot_take(client, app):
    from tests.runtime.paddle_models import detector

    r = client.post("/api/v1/models", files={"file": ("detector.onnx", detector().SerializeToString())})
    assert r.status_code == 201, r.text
    model = r.json()["id"]
    shapes = {"x": [1, 3, 20, 12], "bias": [1, 2, 10, 1]}
    bad = client.post("/api/v1/sweeps", json={"models": [model], "strategies": ["naive"], "shapes": {"x": "1x3x20"}})
    assert bad.status_code == 422 and "rank 4" in bad.json()["detail"] and model in bad.json()["detail"], bad.text
    assert client.app.state.storage.count_jobs(("queued", "running", "done", "failed")) == 0
    r = client.post("/api/v1/sweeps", json={"models": [model], "strategies": ["greedy_by_size"], "shapes": shapes})
    assert r.status_code == 202, r.text
    sweep = _finished(client, r.json()["id"])
    assert sweep["state"] == "done", sweep["error"]
    (row,) = sweep["results"]
    path = app.state.storage.model_file(app.state.storage.get_model(model))
    assert row["shapes"] == shapes and row["valid"]
    assert row["lower_bound"] == load(runtime.memory_problem(runtime.load_model(path, shapes=shapes)))
