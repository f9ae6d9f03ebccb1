"""Jobs are batch work: the workers of the service's cluster run at the lowest CPU priority, the
server at its own; a local cluster's scheduler lives in a process of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from distributed import Client

from app.cluster import PRIORITY_ENV, ROOT, local_cluster

IDLE = getattr(os, "SCHED_IDLE", None)
pytestmark = pytest.mark.skipif(IDLE is None, reason="SCHED_IDLE is Linux's")


def test_the_services_workers_run_at_the_lowest_priority_and_the_server_does_not(make_app, monkeypatch):
    # A cluster of its own at the service's priority: the tests' keep theirs (tests/conftest.py).
    monkeypatch.delenv(PRIORITY_ENV, raising=False)
    with local_cluster(workers=1) as address, Client(address, timeout=30) as client:
        app = make_app(scheduler=address)
        assert app.state.jobs is not None  # the app registered its plugin when it connected
        loops = client.run(os.sched_getscheduler, 0)  # each worker's event loop thread
        tasks = client.gather(client.map(os.sched_getscheduler, [0, 0, 0, 0], pure=False))  # threads running tasks
    assert loops and set(loops.values()) == {IDLE}
    assert set(tasks) == {IDLE}
    assert os.sched_getscheduler(0) != IDLE  # the test process (the server's) keeps its priority


THREADS = """
import os, threading
from app.cluster import lowest_priority
started, stop = threading.Event(), threading.Event()
def wait():
    started.set()
    stop.wait()
before = threading.Thread(target=wait)
before.start()
started.wait()
print(lowest_priority())
after = threading.Thread(target=lambda: print(os.sched_getscheduler(0)))
after.start(); after.join()
print(os.sched_getscheduler(before.native_id), os.sched_getscheduler(0))
stop.set()
"""


def test_lowest_priority_reaches_every_thread_of_the_process_and_those_it_starts_later():
    env = {k: v for k, v in os.environ.items() if k != PRIORITY_ENV}
    out = subprocess.run(
        [sys.executable, "-c", THREADS], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True
    )
    assert out.returncode == 0, out.stderr.decode()
    said, later, earlier = out.stdout.decode().split("\n", 2)
    assert said == "idle" and int(later) == IDLE
    assert [int(p) for p in earlier.split()] == [IDLE, IDLE]  # a thread started before, and the caller


def test_workers_told_to_keep_their_priority_keep_it():
    env = {**os.environ, "PYTHONPATH": str(ROOT), PRIORITY_ENV: "normal"}
    out = subprocess.run([sys.executable, "-c", THREADS], cwd=ROOT, env=env, capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    said, later, earlier = out.stdout.decode().split("\n", 2)
    assert said == "normal" and int(later) == os.SCHED_OTHER
    assert [int(p) for p in earlier.split()] == [os.SCHED_OTHER, os.SCHED_OTHER]


def test_a_local_clusters_scheduler_and_workers_run_outside_the_process_that_starts_it():
    others = {p.pid for p in psutil.Process().children(recursive=True)}  # the session's cluster, say
    with local_cluster(workers=1) as address, Client(address, timeout=30) as client:
        scheduler = client.run_on_scheduler(os.getpid)
        workers = list(client.run(os.getpid).values())
        cluster = [p for p in psutil.Process().children(recursive=True) if p.pid not in others]
        assert scheduler != os.getpid() and len(workers) == 1 and os.getpid() not in workers
        assert {scheduler, *workers} <= {p.pid for p in cluster}
    _, alive = psutil.wait_procs(cluster, timeout=30)
    assert not alive, f"left running: {[p.pid for p in alive]}"


def _http_port(dask_scheduler) -> int:  # run on the scheduler
    return dask_scheduler.http_server.port


def test_two_local_clusters_serve_their_schedulers_http_on_free_loopback_ports_without_a_warning(capfd):
    with (
        local_cluster(workers=1) as a,
        local_cluster(workers=1) as b,
        Client(a, timeout=30) as one,
        Client(b, timeout=30) as two,
    ):
        ports = {one.run_on_scheduler(_http_port), two.run_on_scheduler(_http_port)}
    assert len(ports) == 2 and 8787 not in ports  # not the default port, which one of them would miss
    assert "already in use" not in capfd.readouterr().err


OWNER = """
import time
from app.cluster import local_cluster
with local_cluster(workers=1) as address:
    print(address, flush=True)
    time.sleep(600)
"""


def test_a_local_cluster_closes_when_the_process_that_started_it_is_killed():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().startswith(b"tcp://")
        cluster = psutil.Process(owner.pid).children(recursive=True)
        assert len(cluster) >= 3  # the cluster's process, a nanny and its worker
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    _, alive = psutil.wait_procs(cluster, timeout=60)
    assert not alive, f"left running: {[p.pid for p in alive]}"
