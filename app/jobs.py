"""Jobs: long work (slow strategies, runs, pipelines, training demos) as Dask tasks whose state lives
in the database, so that no job runs in a web server's process and any app process can show, stream
or cancel any job.

How a job flows:

1. An app process calls `JobService.submit(kind, title, task, payload, links)`: it writes the job's
   row (queued) and hands `run_job` to the Dask scheduler with `fire_and_forget`, so the job
   finishes even if that app process dies. `task` is a module-level function `(ctx, payload) ->
   result` (pickled by reference); `payload` is plain data (ids, request bodies).
2. On a worker, `run_job` opens the Storage from the data folder and database URL it is given (one
   per worker process), marks the job running (attempts, worker, heartbeat) and calls the task.
   `ctx.report(progress, message, **data)` writes progress and appends a `progress` event; it raises
   `JobCancelled` once the job's `cancel_requested` flag is set (read at most every 0.5 s).
3. The job ends `done` (result), `failed` (error: `JobFailed` -> {status, detail}, anything else ->
   500 with a short trace) or `cancelled`, each with its event. A thread beats every HEARTBEAT_S.

Faults: a worker killed mid-job makes Dask run the job again on another worker (attempts + 1). A
job Dask gave up on, or a scheduler forgot, is found by whichever app process reads it: running
with a heartbeat older than STALE_S and no live task on the scheduler -> failed, "worker lost". A
worker that cannot open the database or see the data folder cannot write the job's row: it logs the
reason on the scheduler, and the app process that reads the job fails it with that reason.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url

from app.cluster import BatchPriority
from app.cluster import local_cluster as local_cluster  # where its users have always found it
from app.db import public_url
from app.errors import AppError
from app.settings import Limits, activate
from app.storage import JobRecord, Storage

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
CANCELLED, INTERRUPTED = "cancelled", "interrupted"  # interrupted: rows from before jobs ran on Dask
FINISHED = (DONE, FAILED, CANCELLED, INTERRUPTED)
ACTIVE = (QUEUED, RUNNING)

HEARTBEAT_S = 2.0  # a running job's worker writes its heartbeat this often
STALE_S = 15.0  # a running job silent this long, with no live task on the scheduler, is lost
QUEUED_GRACE_S = 2.0  # a queued job is looked for on the scheduler only after this long
CANCEL_CHECK_S = 0.5  # `report` reads the cancel flag at most this often
PROGRESS_WRITE_S = 0.25  # and writes progress to the job's row at most this often (every event is kept)
FAILURES_TOPIC = "memplan-job-failures"  # scheduler event log: jobs a worker could not even start
LIVE_TASK_STATES = ("released", "waiting", "queued", "no-worker", "processing", "memory")

# Where a worker finds the shared data folder and database, when it sees them elsewhere than the app
# (set by `memplan worker --data/--database-url`).
WORKER_DATA_ENV = "MEMPLAN_WORKER_DATA"
WORKER_DATABASE_ENV = "MEMPLAN_WORKER_DATABASE_URL"
DATABASE_ENV = "MEMPLAN_DATABASE_URL"  # the service's own setting, inherited by local workers

Task = Callable[["JobContext", dict[str, Any]], dict[str, Any]]


class JobCancelled(Exception):
    """Raised inside a task by `JobContext.report` once the job was asked to stop."""


class QueueFull(Exception):
    """`JobService.submit` refused a job: `max_queued_jobs` jobs already wait for a worker."""


class JobFailed(Exception):
    """Raised by a task to fail its job with a message for the user (status says whose fault);
    `extra` goes into the job's error as is (e.g. where a canary caught a corrupting step)."""

    def __init__(self, detail: str, status: int = 422, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.extra = extra


@dataclass(frozen=True)
class Job(JobRecord):
    """A job as its record in the database says (read-only: the worker and `JobService` change it)."""

    @classmethod
    def of(cls, record: JobRecord) -> Job:
        return cls(**{f.name: getattr(record, f.name) for f in fields(record)})

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED

    def to_json(self) -> dict[str, Any]:
        """The job as the API shows it (`JobOut`)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "state": self.state,
            "progress": self.progress,
            "message": self.message,
            "result": self.result,
            "error": self.error,
            "links": {
                "self": f"/api/v1/jobs/{self.id}",
                "events": f"/api/v1/jobs/{self.id}/events",
                "page": f"/jobs/{self.id}",
                **{k: v.replace("{id}", self.id) for k, v in self.links.items()},
            },
        }


@dataclass(frozen=True)
class JobEnv:
    """What a worker needs to run any job: the shared data folder, the database, the service's limits."""

    data_dir: str
    # With its password hidden (`app.db.public_url`): task arguments are visible to everyone
    # connected to the scheduler. A worker takes the password from its own environment
    # (`worker_database_url`).
    database_url: str | None
    limits: Limits


def task_key(job_id: str) -> str:
    return f"memplan-job-{job_id}"


def finish(storage: Storage, job_id: str, state: str, message: str, **data: Any) -> None:
    """End a job: its final event first, then its row. The two are separate writes, so a reader that
    sees the row finished always finds the final event (`JobService.wait`, a page); a stream that
    sends the final event waits for the row before it ends (`app.routes.api.jobs`)."""
    changes: dict[str, Any] = {"state": state, "message": message, **data}
    row = None if state == DONE else storage.get_job(job_id)
    changes["progress"] = 1.0 if state == DONE else (row.progress if row else 0.0)
    event = {"state": state, "progress": changes["progress"], "message": message}
    event.update({k: v for k, v in data.items() if k in ("result", "error")})
    storage.add_job_event(job_id=job_id, event=state, data=event)
    storage.update_job(job_id, finished=time.time(), **changes)


# ---- the app's side ---------------------------------------------------------------------------------


class SchedulerUnreachable(OSError):
    """No Dask scheduler answered at the address (one line: the address and what failed)."""


def connect(address: str, timeout: float = 10.0) -> Any:
    """A `distributed.Client` to the scheduler at `address`; `SchedulerUnreachable` when none answers."""
    from distributed import Client

    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        what = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SchedulerUnreachable(f"cannot reach the Dask scheduler at {address}: {what}") from None


class JobService:
    """Submit, read, follow and cancel jobs; every state is the database's, every task Dask's."""

    def __init__(
        self, client: Any, storage: Storage, env: JobEnv, *, max_queued: int, stale_s: float = STALE_S
    ) -> None:
        self.client = client
        self.storage = storage
        self.env = env
        self.max_queued = max_queued
        self.stale_s = stale_s
        # The scheduler gives it to every worker that joins, after it joined (a local cluster's got it
        # already). A scheduler that refuses plugins still runs jobs, at normal priority.
        with suppress(Exception):
            client.register_plugin(BatchPriority(), name=BatchPriority.NAME)

    def submit(
        self, kind: str, title: str, task: Task, payload: dict[str, Any], links: dict[str, str] | None = None
    ) -> Job:
        """Record the job and hand it to the scheduler; `QueueFull` when `max_queued` jobs already wait."""
        from distributed import fire_and_forget

        waiting = self.storage.count_jobs((QUEUED,))
        if waiting >= self.max_queued:
            self._reap_all()  # lost jobs must not hold places in the line
            waiting = self.storage.count_jobs((QUEUED,))
        if waiting >= self.max_queued:
            raise QueueFull(
                f"{waiting} jobs wait for a worker, the most this service takes (max_queued_jobs="
                f"{self.max_queued}); try again when one starts"
            )
        job_id = secrets.token_hex(6)
        self.storage.create_job(job_id=job_id, kind=kind, title=title, links=dict(links or {}), created=time.time())
        try:
            future = self.client.submit(run_job, job_id, task, payload, self.env, key=task_key(job_id), pure=False)
            fire_and_forget(future)
        except Exception as e:
            reason = f"the Dask scheduler did not take the job ({type(e).__name__}: {e})"
            finish(self.storage, job_id, FAILED, reason, error={"status": 503, "detail": reason})
            raise AppError(503, reason) from None
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> Job | None:
        """The job as stored; one that is lost (see the module's docstring) is failed first."""
        row = self.storage.get_job(job_id)
        if row is None:
            return None
        job = Job.of(row)
        return self._reap(job) if job.state in ACTIVE else job

    def cancel(self, job_id: str) -> Job | None:
        """Ask a job to stop: a queued one is cancelled at once, a running one at its next report."""
        if self.storage.request_cancel(job_id):
            row = self.storage.get_job(job_id)
            if row is not None and row.state == QUEUED:
                finish(self.storage, job_id, CANCELLED, "cancelled before it started")
        return self.get(job_id)

    def events(self, job_id: str, after: int = -1) -> list[dict[str, Any]]:
        """The job's events with seq > `after`, in order: {seq, event, data}."""
        return self.storage.job_events(job_id, after=after)

    def wait(self, job_id: str, timeout: float) -> Job | None:
        """Poll until the job is finished (tests, benchmarks); the job, or None when time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.get(job_id)
            if job is None or job.is_finished:
                return job
            time.sleep(0.1)
        return None

    def close(self) -> None:
        """Close this process's connection to the scheduler (never the cluster: the jobs go on)."""
        self.client.close()

    # ---- lost jobs ------------------------------------------------------------------------------

    def _reap(self, job: Job) -> Job:
        if job.state == QUEUED:  # a fresh row may not have reached the scheduler yet
            quiet, patience = time.time() - job.created, QUEUED_GRACE_S
        else:
            quiet, patience = time.time() - (job.heartbeat or job.created), self.stale_s
        if quiet < patience:
            return job
        reason = self._failure_logged(job.id)
        if reason is None:
            if self._task_alive(job.id):
                return job  # waiting its turn, or busy without beating: Dask still has it
            if job.state == QUEUED:
                reason = "lost: the Dask scheduler no longer has this job (was it restarted?); submit it again"
            else:
                reason = (
                    f"worker lost: the job's worker{' ' + job.worker if job.worker else ''} stopped "
                    f"(attempt {job.attempts}) and no worker runs it any more; submit it again"
                )
        now = self.storage.get_job(job.id)
        if now is None or (now.state, now.attempts, now.heartbeat) != (job.state, job.attempts, job.heartbeat):
            return Job.of(now) if now else job  # it moved on while we looked: not lost
        finish(self.storage, job.id, FAILED, reason, error={"status": 503, "detail": reason})
        return Job.of(self.storage.get_job(job.id) or now)

    def _reap_all(self) -> None:
        for row in self.storage.jobs_in(ACTIVE):
            self._reap(Job.of(row))

    def _task_alive(self, job_id: str) -> bool:
        key = task_key(job_id)
        try:
            states = self.client.sync(self.client.scheduler.get_task_status, keys=[key])
        except Exception:
            return True  # cannot tell: never fail a job on a hunch
        return states.get(key) in LIVE_TASK_STATES

    def _failure_logged(self, job_id: str) -> str | None:
        try:
            events = self.client.get_events(FAILURES_TOPIC)
        except Exception:
            return None
        for _, msg in reversed(events):
            if isinstance(msg, dict) and msg.get("job") == job_id:
                return str(msg.get("reason"))
        return None


# ---- the worker's side ------------------------------------------------------------------------------


class JobContext:
    """What a task sees of its job: its id, the storage, and `report`."""

    def __init__(self, job_id: str, storage: Storage) -> None:
        self.id = job_id
        self.storage = storage
        self.progress = 0.0
        self.message = "running"
        self._checked = 0.0
        self._written = 0.0

    def report(self, progress: float | None = None, message: str | None = None, **data: Any) -> None:
        """Record progress (0..1) and a message; `data` goes into the event for listeners.

        Raises `JobCancelled` when the job was cancelled, so the task stops here.
        """
        self._check_cancel()
        self._advance(progress, message)
        self._write_progress()
        self.storage.add_job_event(
            job_id=self.id, event="progress", data={"progress": self.progress, "message": self.message, **data}
        )

    def report_many(self, reports: Sequence[tuple[float | None, str | None, dict[str, Any]]]) -> None:
        """`report(progress, message, **data)` for each of `reports` in order, the same events, written
        in one transaction (a sweep's rows): one database write instead of one per event."""
        self._check_cancel()
        events = []
        for progress, message, data in reports:
            self._advance(progress, message)
            events.append({"progress": self.progress, "message": self.message, **data})
        self._write_progress()
        self.storage.add_job_events(job_id=self.id, event="progress", datas=events)

    def _check_cancel(self) -> None:
        now = time.monotonic()
        if now - self._checked >= CANCEL_CHECK_S:
            self._checked = now
            row = self.storage.get_job(self.id)
            if row is None or row.cancel_requested:
                raise JobCancelled

    def _advance(self, progress: float | None, message: str | None) -> None:
        if progress is not None:
            self.progress = max(0.0, min(1.0, progress))
        if message is not None:
            self.message = message

    def _write_progress(self) -> None:
        now = time.monotonic()
        if now - self._written >= PROGRESS_WRITE_S:
            self._written = now
            self.storage.update_job(self.id, progress=self.progress, message=self.message, heartbeat=time.time())


_storages: dict[tuple[str, str | None], Storage] = {}
_storages_lock = threading.Lock()


def _worker_address() -> str:
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:  # called outside a worker (a test calling run_job directly)
        return f"pid {os.getpid()}"


def _open_storage(env: JobEnv) -> Storage:
    """This worker process's Storage for `env` (opened once): the data folder must be there already,
    since opening would otherwise make an empty one on a machine that lacks the shared volume."""
    data_dir = os.environ.get(WORKER_DATA_ENV) or env.data_dir
    url = worker_database_url(env.database_url, os.environ)
    with _storages_lock:
        if (data_dir, url) not in _storages:
            folder = Path(data_dir)
            if not folder.is_dir() or not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
                why = "does not exist" if not folder.exists() else "is not a folder it may read and write"
                raise OSError(f"the data folder {folder} {why} on this worker")
            # owns_jobs=False: other workers run jobs on this database too; opening must leave them be.
            _storages[(data_dir, url)] = Storage(folder, database_url=url, owns_jobs=False)
        return _storages[(data_dir, url)]


def worker_database_url(given: str | None, environ: Mapping[str, str]) -> str | None:
    """The database URL this worker connects with, for a job that names `given` (None: the data
    folder's SQLite; a password hidden as ``***`` by the service).

    `MEMPLAN_WORKER_DATABASE_URL` wins (the database as this machine reaches it). A hidden password
    comes from the worker's own `MEMPLAN_DATABASE_URL` when that names the same database (local
    workers inherit the service's), else from where PostgreSQL's client looks without one:
    PGPASSWORD or the password file (~/.pgpass, PGPASSFILE)."""
    if environ.get(WORKER_DATABASE_ENV):
        return environ[WORKER_DATABASE_ENV]
    if given is None or "***" not in given:
        return given
    own = environ.get(DATABASE_ENV)
    if own and public_url(own) == given:
        return own
    url = make_url(given)
    bare = URL.create(url.drivername, url.username, None, url.host, url.port, url.database, url.query)
    return bare.render_as_string(hide_password=False)


def _beat(storage: Storage, job_id: str, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with suppress(Exception):  # the next beat tries again; the reaper judges only long silences
            storage.update_job(job_id, heartbeat=time.time())


def run_job(job_id: str, task: Task, payload: dict[str, Any], env: JobEnv) -> str:
    """The Dask task behind every job: run `task` with the job's state in the database; the final state.

    A failure that cannot be written to the job's row (no database, no data folder) is logged on the
    scheduler under FAILURES_TOPIC, where the app process that reads the job finds it.
    """
    worker = _worker_address()
    try:
        return _run(job_id, task, payload, env, worker)
    except Exception as e:
        _log_failure(job_id, f"worker {worker} cannot run the job: {e}")
        raise


def _log_failure(job_id: str, reason: str) -> None:
    from distributed import get_worker

    with suppress(ValueError):  # not on a worker: the exception is all there is
        get_worker().log_event(FAILURES_TOPIC, {"job": job_id, "reason": reason})


def _run(job_id: str, task: Task, payload: dict[str, Any], env: JobEnv, worker: str) -> str:
    storage = _open_storage(env)
    row = storage.get_job(job_id)
    if row is None or row.state in FINISHED:
        return row.state if row else "missing"  # cancelled while queued, or finished by an earlier attempt
    if row.cancel_requested:
        finish(storage, job_id, CANCELLED, "cancelled before it started")
        return CANCELLED
    activate(env.limits)  # one job at a time per worker process: the limits are this job's
    attempts = row.attempts + 1
    storage.update_job(
        job_id, state=RUNNING, progress=0.0, message="running", attempts=attempts, worker=worker, heartbeat=time.time()
    )
    storage.add_job_event(job_id=job_id, event=RUNNING, data={"state": RUNNING, "progress": 0.0, "message": "running"})
    stop = threading.Event()
    beating = threading.Thread(target=_beat, args=(storage, job_id, stop), name=f"beat-{job_id}", daemon=True)
    beating.start()
    try:
        return _run_task(storage, job_id, task, payload)
    finally:
        stop.set()
        beating.join()


def _run_task(storage: Storage, job_id: str, task: Task, payload: dict[str, Any]) -> str:
    ctx = JobContext(job_id, storage)
    try:
        result = task(ctx, payload)
    except JobCancelled:
        finish(storage, job_id, CANCELLED, "cancelled while running")
        return CANCELLED
    except JobFailed as e:
        error = {"status": e.status, "detail": e.detail, **e.extra}
        finish(storage, job_id, FAILED, e.detail, error=error)
        return FAILED
    except Exception as e:  # a bug: keep the worker up and show what happened
        error = {"status": 500, "detail": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)}
        finish(storage, job_id, FAILED, error["detail"], error=error)
        return FAILED
    finish(storage, job_id, DONE, "done", result=result)
    return DONE
