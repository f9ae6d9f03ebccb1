"""Access control, job cancellation, and durability of a real server killed with SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.jobs import CANCELLED, RUNNING, QueueFull
from reliability.malformed import base_model
from tests.reliability.processes import free_port, wait_for

MODEL = base_model().SerializeToString()
ROOT = Path(__file__).resolve().parents[2]


def test_token_is_required_for_writes_only(make_client):
    with make_client(token="s3cret") as client:
        r = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)})
        assert r.status_code == 401 and "MEMPLAN_TOKEN" in r.json()["detail"]
        r = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}, headers={"x-memplan-token": "wrong"})
        assert r.status_code == 401
        r = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}, headers={"authorization": "Bearer s3cret"})
        assert r.status_code == 201
        assert client.get("/api/v1/models").status_code == 200


def test_read_only_mode_refuses_every_write_and_serves_reads(make_client):
    with make_client() as client:
        model_id = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}).json()["id"]
    with make_client(read_only=True, token="t") as client:
        r = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}, headers={"authorization": "Bearer t"})
        assert r.status_code == 403 and "read-only" in r.json()["detail"]
        assert client.delete(f"/api/v1/models/{model_id}").status_code == 403
        assert client.get(f"/api/v1/models/{model_id}").status_code == 200
        assert client.get(f"/models/{model_id}").status_code == 200


def spin(ctx, payload):
    """A job that works until it is cancelled (at most a minute)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ctx.report(message="working")
        time.sleep(0.02)
    return {}


def test_jobs_are_cancelled_queued_or_running_and_the_queue_is_bounded(make_client):
    with make_client(max_queued_jobs=1) as client:
        jobs = client.app.state.jobs
        jobs.client.wait_for_workers(2, timeout=30)
        running = []
        for _ in range(2):  # one per worker, each started before the next (only one may wait)
            running.append(jobs.submit("test", "spins until cancelled", spin, {}))
            wait_for(lambda: jobs.get(running[-1].id).state == RUNNING, 20, "a worker spinning")
        waiting = jobs.submit("test", "waits", spin, {})
        with pytest.raises(QueueFull, match="wait for a worker"):
            jobs.submit("test", "one too many", spin, {})
        r = client.post(
            "/api/v1/problems/plan",
            params={"strategies": "hill_climb", "background": "true"},
            content="id,lower,upper,size\na,0,1,8\n",
            headers={"content-type": "text/csv"},
        )
        assert r.status_code == 429 and "max_queued_jobs" in r.json()["detail"]
        assert jobs.cancel(waiting.id).state == CANCELLED  # a queued job: at once
        for job in running:
            assert client.post(f"/api/v1/jobs/{job.id}/cancel").status_code == 200
        for job in running:
            stopped = jobs.wait(job.id, 10)
            assert stopped is not None and stopped.state == CANCELLED and stopped.message == "cancelled while running"
        assert jobs.cancel(running[0].id).state == CANCELLED  # already finished: left as is


def test_tensor_element_limit_refuses_a_big_input(make_client):
    with make_client(max_tensor_elements=100) as client:
        model_id = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}).json()["id"]
        r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["naive"], "dims": {"batch": 1}})
        assert r.status_code == 422 and "max_tensor_bytes" in r.json()["detail"]


# ---- a real server, killed ------------------------------------------------------------------


def _serve(data: Path, port: int, scheduler: str) -> subprocess.Popen:
    """The app as `uvicorn --factory` builds it from the environment (MEMPLAN_DATA, MEMPLAN_SCHEDULER)."""
    env = {**os.environ, "MEMPLAN_DATA": str(data), "MEMPLAN_SCHEDULER": scheduler, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:create_app",
            "--factory",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/models", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start in 30 s")


def _slow_problem() -> str:
    rng = random.Random(1)
    rows = ["id,lower,upper,size"]
    for k in range(400):
        first = rng.randrange(300)
        rows.append(f"b{k},{first},{first + rng.randrange(1, 40)},{rng.randrange(1, 5000)}")
    return "\n".join(rows) + "\n"


def test_kill_9_mid_upload_and_mid_job_leaves_no_partial_model_and_the_job_finishes(tmp_path, dask_scheduler):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = _serve(tmp_path, port, dask_scheduler)
    try:
        kept = httpx.post(f"{base}/api/v1/models", files={"file": ("kept.onnx", MODEL)}).json()
        job = httpx.post(
            f"{base}/api/v1/problems/plan",
            params={"strategies": "hill_climb", "time_limit": 3, "background": "true"},
            content=_slow_problem(),
            headers={"content-type": "text/csv"},
        ).json()["job"]
        # An upload that stops half way: headers promise 10 MB, 1 MB arrives.
        upload = socket.create_connection(("127.0.0.1", port))
        upload.sendall(
            b"POST /api/v1/models?name=half.onnx HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n" + MODEL + b"\0" * 1_000_000
        )
        wait_for(lambda: any((tmp_path / "incoming").iterdir()), 10, "the half upload on disk")
        wait_for(lambda: httpx.get(f"{base}/api/v1/jobs/{job['id']}").json()["state"] == "running", 10, "job running")
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        upload.close()

        server = _serve(tmp_path, port, dask_scheduler)
        models = httpx.get(f"{base}/api/v1/models").json()["models"]
        assert [m["id"] for m in models] == [kept["id"]]  # the half upload is no model
        assert httpx.get(f"{base}/api/v1/models/{kept['id']}").json()["sha256"] == kept["sha256"]
        assert [blob.stem for blob in (tmp_path / "blobs").glob("*/*")] == [kept["sha256"]]
        # The job ran on a Dask worker, not in the killed process: it went on and finished.
        after = wait_for(
            lambda: (
                (j := httpx.get(f"{base}/api/v1/jobs/{job['id']}").json())["state"] not in ("queued", "running") and j
            ),
            20,
            "the job finished",
        )
        assert after["state"] == "done" and after["result"]["plans"][0]["valid"], after
        plans = httpx.post(
            f"{base}/api/v1/models/{kept['id']}/plans", json={"strategies": ["naive"], "dims": {"batch": 1}}
        )
        assert plans.status_code == 200 and plans.json()["plans"][0]["valid"]
    finally:
        server.kill()
        server.wait(10)
