"""The local Dask cluster of `memplan serve` (and of tests and benchmarks), and the batch priority
of every worker that runs memplan's jobs.

`local_cluster()` starts the cluster in a child process of its own (`serve_cluster` there):
its scheduler and worker processes never share the starting process's interpreter lock, so a web
server that starts one keeps its cores for pages. The child prints the scheduler's address and
lives until its standard input closes: when the context ends, or when its parent dies however it
dies (SIGKILL included), the child closes the cluster and exits.

Worker processes run at the lowest CPU priority (`BatchPriority`): jobs are batch work, pages are
interactive, so a busy worker takes only the CPU time the server leaves idle.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

ROOT = Path(__file__).resolve().parents[1]  # the folder holding app/, runtime/ and planner/
PRIORITY_ENV = "MEMPLAN_WORKER_PRIORITY"  # "normal": job workers keep the priority they start with
CLOSE_TIMEOUT_S = 60.0  # and is killed if it has not closed it this long after being asked


def lowest_priority() -> str:
    """Put every thread of this process (and so the threads they start) at the lowest CPU priority:
    SCHED_IDLE where the OS has it (Linux), else nice 19; the one used, "idle" or "nice".

    With PRIORITY_ENV set to "normal" nothing changes ("normal"): for workers on machines of their
    own, or on a machine whose other work would otherwise keep them from ever running.
    """
    if os.environ.get(PRIORITY_ENV, "").strip().lower() == "normal":
        return "normal"
    threads = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            for tid in threads:  # Linux schedules threads: each one, not only the calling thread
                with suppress(ProcessLookupError):  # a thread that ended meanwhile
                    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        except OSError:
            pass  # refused (a sandbox): niceness still works
    if hasattr(os, "setpriority"):
        for tid in threads:
            with suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, tid, BatchPriority.NICENESS)
    elif hasattr(os, "nice"):
        os.nice(max(0, BatchPriority.NICENESS - os.nice(0)))
    return "nice"


class BatchPriority(WorkerPlugin):  # type: ignore[misc]
    """A Dask worker plugin: the worker process runs at the lowest CPU priority (`lowest_priority`).

    Jobs are batch work; pages are interactive. On a machine that hosts both, a busy worker then
    takes the cores the server leaves idle instead of slowing its pages.
    """

    NAME = "memplan-batch-priority"
    NICENESS = 19  # where SCHED_IDLE is not available

    def setup(self, worker: Any) -> None:
        lowest_priority()


@contextmanager
def local_cluster(workers: int = 2) -> Iterator[str]:
    """A Dask cluster of `workers` worker processes on loopback, its scheduler in a process of its
    own, for the time of the context; its scheduler's address."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    child = subprocess.Popen(
        # Imported by name, not run as __main__: the workers unpickle `app.cluster.BatchPriority`.
        [sys.executable, "-c", f"from app.cluster import serve_cluster; serve_cluster({int(workers)})"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C stops the server, which then closes the cluster
    )
    assert child.stdin is not None and child.stdout is not None
    address = child.stdout.readline().strip()
    child.stdout.close()
    if not address.startswith("tcp://"):
        child.kill()
        child.wait()
        raise OSError(f"the local Dask cluster did not start (its process ended with exit code {child.returncode})")
    try:
        yield address
    finally:
        child.stdin.close()  # the child closes its cluster and exits
        try:
            child.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def serve_cluster(workers: int) -> None:
    """The child's side: start the cluster, print its address on the real standard output, keep
    it up until standard input closes."""
    from distributed import Client, LocalCluster

    # The worker processes inherit file descriptor 1: point it at stderr, so that nothing they
    # print lands in a pipe no one reads any more; the address goes out on a copy of the pipe.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # The scheduler's small HTTP server (health routes) on a free loopback port: its default,
        # 8787, is often taken (another cluster), which only earned a warning on every start.
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    try:
        # Registered with the scheduler, not given to the workers: a worker (one a nanny restarts too)
        # then lowers its priority once it has joined, not while it starts and registers.
        with Client(cluster, set_as_default=False) as client:
            client.register_plugin(BatchPriority(), name=BatchPriority.NAME)
        out.write(f"{cluster.scheduler_address}\n")
        out.close()
        sys.stdin.read()  # until the parent closes it, or dies
    finally:
        cluster.close()
