"""Runs through the service on the real app (its storage, its Dask workers): the outputs a run
reports are onnxruntime's for the same inputs (computed here), the stored run is the job's
result, and a plan of another model or a broken plan is refused before any work."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest

from app.errors import AppError
from app.schemas import PlanRequest, RunRequest
from app.services import library, planning, runs
from tests.memory_models import mlp, save
from tests.patience import JOB_SECONDS


def _stored_mlp(client, tmp_path, seed: int = 0):
    path = save(mlp(seed=seed), tmp_path / f"mlp{seed}.onnx")
    r = client.post("/api/v1/models", files={"file": (path.name, path.read_bytes())})
    assert r.status_code == 201, r.text
    return client.app.state.storage.get_model(r.json()["id"]), path


def test_a_run_reports_onnxruntimes_outputs_and_is_stored(client, tmp_path):
    storage, jobs = client.app.state.storage, client.app.state.jobs
    record, path = _stored_mlp(client, tmp_path)
    x = np.random.default_rng(7).standard_normal((3, 32)).astype(np.float32)
    npz = io.BytesIO()
    np.savez(npz, x=x)
    job = runs.start(storage, jobs, record, RunRequest(dims={"N": 3}, verify="none"), npz.getvalue())
    done = jobs.wait(job.id, JOB_SECONDS)
    assert done is not None and done.state == "done", done and done.error
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (reported,) = done.result["outputs"]
    assert reported["shape"] == [3, 10] and reported["first"] == pytest.approx(expected.reshape(-1)[:6], rel=1e-4)
    assert reported["mean"] == pytest.approx(float(expected.astype(np.float64).mean()), rel=1e-4, abs=1e-7)
    stored = storage.get_run(job.id)
    assert stored is not None and stored.model_id == record.id and stored.result["outputs"] == done.result["outputs"]
    assert stored.plan_id == done.result["plan_id"]


def test_a_plan_of_another_model_is_refused_naming_it(client, tmp_path):
    storage, jobs = client.app.state.storage, client.app.state.jobs
    first, _ = _stored_mlp(client, tmp_path, seed=0)
    second, _ = _stored_mlp(client, tmp_path, seed=1)
    made = planning.plan_model(storage, jobs, first, PlanRequest(strategies=["greedy_by_size"], dims={"N": 2}))
    plan_id = made["plans"][0]["id"]
    with pytest.raises(AppError) as caught:
        runs.start(storage, jobs, second, RunRequest(plan_id=plan_id, dims={"N": 2}), None)
    assert caught.value.status == 404 and plan_id in caught.value.detail and second.id in caught.value.detail
    assert library.model_path(storage, first).exists()  # nothing else touched


def test_unreadable_inputs_are_refused_before_the_job(client, tmp_path):
    storage, jobs = client.app.state.storage, client.app.state.jobs
    record, _ = _stored_mlp(client, tmp_path)
    with pytest.raises(AppError) as caught:
        runs.start(storage, jobs, record, RunRequest(dims={"N": 2}), b"not an npz")
    assert caught.value.status == 422 and "numpy.savez" in caught.value.detail
