"""Access control, job cancellation, and durability of a real server killed with SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.jobs import CANCELLED, JobManager
from reliability.malformed import base_model

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


def test_jobs_are_cancelled_queued_or_running_and_the_queue_is_bounded():
    jobs = JobManager(1, max_queued=1)
    started = threading.Event()

    def spin(job):
        started.set()
        while True:
            job.report(message="working")
            time.sleep(0.01)

    running = jobs.submit("test", "spins until cancelled", spin)
    waiting = jobs.submit("test", "waits", spin)
    with pytest.raises(Exception, match="running or waiting"):
        jobs.submit("test", "one too many", spin)
    assert started.wait(5)
    assert jobs.cancel(waiting) and waiting.state == CANCELLED
    assert jobs.cancel(running) and running.wait(5) and running.state == CANCELLED
    assert not jobs.cancel(running)  # already finished
    jobs.shutdown()


def test_tensor_element_limit_refuses_a_big_input(make_client):
    with make_client(max_tensor_elements=100) as client:
        model_id = client.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}).json()["id"]
        r = client.post(f"/api/v1/models/{model_id}/plans", json={"strategies": ["naive"], "dims": {"batch": 1}})
        assert r.status_code == 422 and "max_tensor_bytes" in r.json()["detail"]


# ---- a real server, killed ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(data: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "MEMPLAN_DATA": str(data), "PYTHONPATH": str(ROOT)}
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


def test_kill_9_mid_upload_and_mid_job_leaves_no_partial_model_and_marks_the_job(tmp_path):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = _serve(tmp_path, port)
    try:
        kept = httpx.post(f"{base}/api/v1/models", files={"file": ("kept.onnx", MODEL)}).json()
        job = httpx.post(
            f"{base}/api/v1/problems/plan",
            params={"strategies": "hill_climb", "time_limit": 60, "background": "true"},
            content=_slow_problem(),
            headers={"content-type": "text/csv"},
        ).json()["job"]
        # An upload that stops half way: headers promise 10 MB, 1 MB arrives.
        upload = socket.create_connection(("127.0.0.1", port))
        upload.sendall(
            b"POST /api/v1/models?name=half.onnx HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 10000000\r\n\r\n" + MODEL + b"\0" * 1_000_000
        )
        deadline = time.monotonic() + 10
        while not any((tmp_path / "incoming").iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        state = httpx.get(f"{base}/api/v1/jobs/{job['id']}").json()["state"]
        assert state == "running"
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        upload.close()
        assert any((tmp_path / "incoming").iterdir())  # the half upload was on disk when it died

        server = _serve(tmp_path, port)
        models = httpx.get(f"{base}/api/v1/models").json()["models"]
        assert [m["id"] for m in models] == [kept["id"]]
        assert httpx.get(f"{base}/api/v1/models/{kept['id']}").json()["sha256"] == kept["sha256"]
        after = httpx.get(f"{base}/api/v1/jobs/{job['id']}").json()
        assert after["state"] == "interrupted" and "interrupted" in after["message"]
        assert not any((tmp_path / "incoming").iterdir())
        plans = httpx.post(
            f"{base}/api/v1/models/{kept['id']}/plans", json={"strategies": ["naive"], "dims": {"batch": 1}}
        )
        assert plans.status_code == 200 and plans.json()["plans"][0]["valid"]
    finally:
        server.kill()
        server.wait(10)
