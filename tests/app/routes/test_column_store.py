"""A big plan's chart columns under the data folder: written when the plan is made, read by another
app process (a real second Python process on the same data folder and database) instead of built
again, and never answering for a deleted plan. Oracle: the plan's own JSON (every buffer's offset)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.services import chart_windows, column_store
from planner.generate import network_like
from tests.runtime.test_session import small_cnn

ROOT = Path(__file__).resolve().parents[3]

# Another app process: reads a plan's columns (`stored_columns` never builds them) and a window of it.
OTHER_PROCESS = """
import json, sys
from pathlib import Path
from app.services import chart_windows
from app.storage import Storage
root, url, problem_id, plan_id = sys.argv[1:5]
storage = Storage(Path(root), url, owns_jobs=False)
columns = chart_windows.stored_columns(storage, problem_id, plan_id)
window = chart_windows.plan_window(storage, plan_id, None, None, None, None, 100_000)
print(json.dumps({"read": columns is not None, "offsets": None if columns is None else columns.offsets.tolist(),
                  "ids": window["rects"]["id"]}))
storage.close()
"""


def in_another_process(script: str, storage, *args: str) -> dict:
    """The JSON that `script` prints last, run by a fresh Python on `storage`'s data folder and database."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(storage.root), storage.url, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _big_plan(client) -> tuple[str, str, dict]:
    r = client.post(
        "/api/v1/problems/plan?strategies=first_fit",
        content=network_like(300, seed=3).dumps(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    plan_id = r.json()["plans"][0]["id"]
    return r.json()["problem_id"], plan_id, client.get(f"/api/v1/plans/{plan_id}").json()


def test_another_process_reads_the_columns_written_when_the_plan_was_made(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100)
    problem_id, plan_id, doc = _big_plan(client)
    storage = client.app.state.storage
    folder = column_store.folder(storage) / problem_id
    assert sorted(p.name for p in folder.iterdir()) == sorted(["problem.npz", f"{plan_id}.npz", "head.json"])
    other = in_another_process(OTHER_PROCESS, storage, problem_id, plan_id)
    assert other["read"] and other["offsets"] == [b["offset"] for b in doc["buffers"]]
    by_size = sorted(range(len(doc["buffers"])), key=lambda k: (-doc["buffers"][k]["size"], k))
    assert other["ids"] == [doc["buffers"][k]["id"] for k in by_size if doc["buffers"][k]["size"] > 0]
    # Without the files the other process has nothing to read: it builds the columns from the
    # database (and writes them again for the next one).
    for path in folder.iterdir():
        path.unlink()
    rebuilt = in_another_process(OTHER_PROCESS, storage, problem_id, plan_id)
    assert not rebuilt["read"] and rebuilt["ids"] == other["ids"]
    assert (folder / f"{plan_id}.npz").exists()


def test_a_small_plan_writes_no_columns(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 100_000)
    problem_id, _, _ = _big_plan(client)
    assert not (column_store.folder(client.app.state.storage) / problem_id).exists()


def _model_plan(client) -> tuple[str, str, str]:
    r = client.post("/api/v1/models", files={"file": ("cnn.onnx", small_cnn().SerializeToString())})
    model_id = r.json()["id"]
    made = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], "dims": {"N": 2}})
    assert made.status_code == 200, made.text
    return model_id, made.json()["problem_id"], made.json()["plans"][0]["id"]


def test_a_deleted_plans_columns_answer_no_more_in_any_process(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 3)  # the small CNN's plan counts as big
    storage = client.app.state.storage
    model_id, problem_id, plan_id = _model_plan(client)
    assert client.get(f"/api/v1/plans/{plan_id}/chart").status_code == 200
    assert chart_windows.cached(plan_id) is not None and (column_store.folder(storage) / problem_id).is_dir()
    # Deleted by another process: this one still holds the columns, and must not answer from them.
    storage.delete_model(model_id)
    assert chart_windows.cached(plan_id) is not None
    gone = client.get(f"/api/v1/plans/{plan_id}/chart")
    assert gone.status_code == 404 and plan_id in gone.json()["detail"]


def test_deleting_a_model_removes_its_plans_columns(client, monkeypatch):
    monkeypatch.setattr(chart_windows, "AGGREGATE_ABOVE", 3)
    storage = client.app.state.storage
    model_id, problem_id, plan_id = _model_plan(client)
    kept_problem, kept_plan, _ = _big_plan(client)  # another problem's columns stay
    assert client.delete(f"/api/v1/models/{model_id}").status_code == 204
    assert chart_windows.cached(plan_id) is None
    assert not (column_store.folder(storage) / problem_id).exists()
    assert (column_store.folder(storage) / kept_problem / f"{kept_plan}.npz").exists()
    assert client.get(f"/api/v1/plans/{plan_id}/chart").status_code == 404


def test_column_files_are_named_by_record_ids_only(client):
    storage = client.app.state.storage
    for bad in ("../x", "a/b", ".hidden", ""):
        try:
            column_store.path(storage, bad, "problem")
        except ValueError as e:
            assert "record id" in str(e)
        else:
            raise AssertionError(f"{bad!r} was accepted as a problem id")
