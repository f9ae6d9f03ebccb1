"""Jobs on Dask under faults, with real processes on loopback: worker processes killed with SIGKILL,
an app process killed with SIGKILL, workers that cannot reach the data folder or the database, a
scheduler that is not there, and two app processes serving as one service."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import httpx
import pytest

from app.jobs import local_cluster
from reliability.malformed import base_model
from tests.reliability.processes import free_port, memplan, serve, stop, wait_for

pytestmark = pytest.mark.timeout(60)

MODEL = base_model().SerializeToString()


def _slow_problem() -> str:
    """A problem hill climbing does not solve to LOAD early: it searches for its whole time limit."""
    rng = random.Random(1)
    rows = ["id,lower,upper,size"]
    for k in range(400):
        first = rng.randrange(300)
        rows.append(f"b{k},{first},{first + rng.randrange(1, 40)},{rng.randrange(1, 5000)}")
    return "\n".join(rows) + "\n"


def _plan_in_background(http, seconds: float) -> str:
    """Submit hill climbing for `seconds` as a job; its id."""
    r = http.post(
        "/api/v1/problems/plan",
        params={"strategies": "hill_climb", "time_limit": seconds, "background": "true"},
        content=_slow_problem(),
        headers={"content-type": "text/csv"},
    )
    assert r.status_code == 200, r.text
    return r.json()["job"]["id"]


def _state(http, job_id: str) -> dict:
    return http.get(f"/api/v1/jobs/{job_id}").json()


def _finished(http, job_id: str) -> dict | None:
    job = _state(http, job_id)
    return job if job["state"] not in ("queued", "running") else None


def _events(base: str, job_id: str) -> list[tuple[int, str, dict]]:
    """The job's whole event stream, (id, event, data) each, read until the stream ends."""
    events, seq, kind = [], None, None
    with httpx.stream("GET", f"{base}/api/v1/jobs/{job_id}/events", timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("id: "):
                seq = int(line.removeprefix("id: "))
            elif line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((seq, kind, json.loads(line.removeprefix("data: "))))
    return events


def kill_my_worker(ctx, payload):
    """A task that kills the worker process running it, every time Dask tries it again."""
    ctx.report(0.0, "killing my own worker")
    os.kill(os.getpid(), signal.SIGKILL)


# ---- a worker dies --------------------------------------------------------------------------------


def test_a_worker_killed_mid_job_has_the_job_run_again_on_another(make_client):
    with make_client() as client:
        jobs, storage = client.app.state.jobs, client.app.state.storage
        jobs.client.wait_for_workers(2, timeout=30)
        pids = jobs.client.run(os.getpid)  # asked while idle: a busy worker at idle priority answers late
        job_id = _plan_in_background(client, seconds=3)
        row = wait_for(lambda: (r := storage.get_job(job_id)).state == "running" and r, 20, "the job running")
        doomed = row.worker
        os.kill(pids[doomed], signal.SIGKILL)

        done = wait_for(lambda: _finished(client, job_id), 25, "the job finished after its worker died")
        row = storage.get_job(job_id)
        assert done["state"] == "done", done["error"]
        assert row.attempts == 2 and row.worker != doomed  # run again, elsewhere
        assert done["result"]["plans"][0]["valid"]
        kinds = [e["event"] for e in storage.job_events(job_id)]
        assert kinds.count("running") == 2 and kinds[-1] == "done", (storage.job_events(job_id), row)
        jobs.client.wait_for_workers(2, timeout=30)  # the nanny brought the killed worker back


def test_a_job_that_keeps_killing_its_workers_is_failed_as_worker_lost(make_client):
    with make_client() as client:
        jobs, storage = client.app.state.jobs, client.app.state.storage
        jobs.client.wait_for_workers(2, timeout=30)
        jobs.stale_s = 1.0  # the reaper's patience, short for the test (15 s in service)
        job = jobs.submit("test", "kills its worker", kill_my_worker, {})
        # Dask tries it on a worker 4 times (allowed-failures 3), then gives up: no task is left.
        failed = wait_for(lambda: _finished(client, job.id), 40, "the lost job failed")
        assert failed["state"] == "failed" and failed["error"]["status"] == 503
        assert failed["message"].startswith("worker lost") and "submit it again" in failed["message"]
        assert storage.get_job(job.id).attempts >= 2
        assert storage.job_events(job.id)[-1]["event"] == "failed"
        jobs.client.wait_for_workers(2, timeout=30)


# ---- an app process dies ----------------------------------------------------------------------------


def test_the_job_outlives_the_app_process_that_submitted_it(tmp_path, dask_scheduler):
    first, base = serve(tmp_path, dask_scheduler)
    second = None
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            job_id = _plan_in_background(http, seconds=3)
            wait_for(lambda: _state(http, job_id)["state"] == "running", 20, "the job running")
        first.send_signal(signal.SIGKILL)
        first.wait(10)

        second, other = serve(tmp_path, dask_scheduler)  # same database, data folder and scheduler
        with httpx.Client(base_url=other, timeout=30) as http:
            done = wait_for(lambda: _finished(http, job_id), 40, "the job finished without its app process")
            assert done["state"] == "done", (done["message"], done["error"])
            assert done["result"]["plans"][0]["valid"]
            page = http.get(f"/jobs/{job_id}?format=json").json()
            assert page["job"]["state"] == "done"
        events = _events(other, job_id)  # every event, those written while the first process lived too
        assert [seq for seq, _, _ in events] == list(range(len(events)))
        assert events[0][1] == "running" and events[-1][1] == "done"
    finally:
        stop(first)
        if second is not None:
            stop(second)


def test_two_app_processes_are_one_service(tmp_path, dask_scheduler):
    a, base_a = serve(tmp_path, dask_scheduler)
    b, base_b = serve(tmp_path, dask_scheduler)
    try:
        with httpx.Client(base_url=base_a, timeout=30) as one, httpx.Client(base_url=base_b, timeout=30) as other:
            model_id = one.post("/api/v1/models", files={"file": ("m.onnx", MODEL)}).json()["id"]
            plans = other.post(
                f"/api/v1/models/{model_id}/plans", json={"strategies": ["greedy_by_size"], "dims": {"batch": 2}}
            ).json()["plans"]
            assert plans[0]["valid"]
            run = other.post(f"/api/v1/models/{model_id}/runs", json={"plan_id": plans[0]["id"], "dims": {"batch": 2}})
            assert run.status_code == 202, run.text
            run_id = run.json()["id"]
            events = _events(base_a, run_id)  # followed through the process that did not submit it
            assert events[-1][1] == "done" and any(kind == "progress" for _, kind, _ in events)
            job = _state(one, run_id)
            assert job["state"] == "done" and job["result"]["verdict"]["passed"] is not False
            assert one.get(f"/runs/{run_id}?format=json").json()["result"]["plan_id"] == plans[0]["id"]

            # Resuming with Last-Event-ID through either process gives only what came after it.
            resumed = httpx.get(
                f"{base_b}/api/v1/jobs/{run_id}/events", headers={"last-event-id": str(events[-2][0])}, timeout=30
            )
            assert resumed.text.count("event: ") == 1 and "event: done" in resumed.text

            # Cancelled through the other process: a training demo reports every few steps.
            demo = one.post("/api/v1/training/demo", json={"model": "mlp", "steps": 5000}).json()
            wait_for(lambda: _state(other, demo["id"])["progress"] > 0, 30, "the demo training")
            assert other.post(f"/api/v1/jobs/{demo['id']}/cancel").status_code == 200
            cancelled = wait_for(lambda: _finished(one, demo["id"]), 10, "the demo cancelled")
            assert cancelled["state"] == "cancelled" and cancelled["message"] == "cancelled while running"
    finally:
        stop(a)
        stop(b)


def test_memplan_serve_alone_runs_jobs_on_its_own_cluster_and_closes_it_on_exit(tmp_path):
    import psutil

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MEMPLAN_SCHEDULER"}  # no scheduler: a local cluster
    proc = memplan("serve", "--port", str(port), "--data", str(tmp_path), "--workers", "1", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base), 40, "memplan serve answering")
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the local cluster's worker process"
        with httpx.Client(base_url=base, timeout=30) as http:
            job_id = _plan_in_background(http, seconds=1)
            done = wait_for(lambda: _finished(http, job_id), 30, "the job done")
        assert done["state"] == "done", (done["message"], done["error"])
        assert all(w.pid != proc.pid for w in workers)  # never in the web server's process
        proc.send_signal(signal.SIGINT)  # Ctrl-C: uvicorn stops, then the cluster closes
        assert proc.wait(30) == 0
        gone, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive, f"left running: {[w.pid for w in alive]}"
    finally:
        stop(proc)


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/v1/models", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# ---- a worker that cannot reach the shared storage, a scheduler that is not there --------------------------


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--data", "/nonexistent/memplan-data", "the data folder /nonexistent/memplan-data does not exist"),
        ("--database-url", "sqlite:////nonexistent/memplan.sqlite3", "cannot open the database sqlite:////nonexistent"),
    ],
)
def test_a_worker_that_cannot_reach_the_storage_fails_its_job_with_the_reason(make_client, option, value, said):
    with local_cluster(workers=0) as scheduler:  # a scheduler whose only worker is the one below
        worker = memplan("worker", scheduler, option, value, start_new_session=True, stderr=subprocess.DEVNULL)
        try:
            with make_client(scheduler=scheduler) as client:
                client.app.state.jobs.client.wait_for_workers(1, timeout=30)
                job_id = _plan_in_background(client, seconds=1)
                failed = wait_for(lambda: _finished(client, job_id), 20, "the job failed")
        finally:
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and the process its nanny started
            worker.wait(10)
    assert failed["state"] == "failed" and failed["error"]["status"] == 503
    assert failed["message"].startswith("worker tcp://127.0.0.1:") and said in failed["message"], failed["message"]


def test_an_unreachable_scheduler_stops_serve_and_worker_at_once_with_one_line(tmp_path):
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    procs = [
        memplan(
            "serve", "--port", str(free_port()), "--data", str(tmp_path), "--scheduler", nowhere, stderr=subprocess.PIPE
        ),
        memplan("worker", nowhere, stderr=subprocess.PIPE),
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=40)
        lines = err.decode().strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, err.decode()
        assert lines[0].startswith(f"memplan: error: cannot reach the Dask scheduler at {nowhere}: ")
    assert time.monotonic() - started < 30
