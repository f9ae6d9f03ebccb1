"""A small in-process job manager: long work (slow strategies, runs) on a few threads.

A job runs `work(job)`; the work reports progress through `job.report(...)`, which both
updates the job's state and appends an event for server-sent-event listeners. At most
`max_workers` jobs run at once; the rest wait in line in submission order, at most
`max_queued` of them (one more is refused, so a flood of requests cannot pile up work).

A job can be cancelled: a queued one never starts; a running one stops at its next
`report` (every op of a run, every strategy of a plan), which raises `JobCancelled`.
Every change of state is handed to `on_change` (the service stores it in SQLite), so a
job that was running when the process died is found and marked interrupted on restart.
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
CANCELLED, INTERRUPTED = "cancelled", "interrupted"
FINISHED = (DONE, FAILED, CANCELLED, INTERRUPTED)


class JobCancelled(Exception):
    """Raised inside the work by `Job.report` once the job was asked to stop."""


class QueueFull(Exception):
    """`JobManager.submit` refused a job: `max_queued` jobs already wait for a worker."""


class JobFailed(Exception):
    """Raised by work to fail its job with a message for the user (status says whose fault)."""

    def __init__(self, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


class Job:
    def __init__(self, kind: str, title: str, links: dict[str, str] | None = None) -> None:
        self.id = secrets.token_hex(6)
        self.kind = kind
        self.title = title
        self.state = QUEUED
        self.progress = 0.0
        self.message = "waiting for a free worker"
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.links = dict(links or {})
        self.created = time.time()
        self.finished: float | None = None
        self.events: list[dict[str, Any]] = []
        self.cancel_requested = False
        self._changed = threading.Condition()

    # ---- called by the work --------------------------------------------------------------

    def report(self, progress: float | None = None, message: str | None = None, **data: Any) -> None:
        """Record progress (0..1) and a message; `data` goes into the event for listeners.

        Raises `JobCancelled` when the job was cancelled, so the work stops here.
        """
        if self.cancel_requested:
            raise JobCancelled
        with self._changed:
            if progress is not None:
                self.progress = max(0.0, min(1.0, progress))
            if message is not None:
                self.message = message
            self._emit("progress", {"progress": self.progress, "message": self.message, **data})

    def _emit(self, event: str, data: dict[str, Any]) -> None:
        # Caller holds the condition.
        self.events.append({"seq": len(self.events), "event": event, "data": data})
        self._changed.notify_all()

    def _set_state(self, state: str, **data: Any) -> None:
        with self._changed:
            self.state = state
            if state in FINISHED:
                self.finished = time.time()
            self._emit(state, {"state": state, "progress": self.progress, "message": self.message, **data})

    # ---- read by the API -----------------------------------------------------------------

    def wait_events(self, after: int, timeout: float) -> list[dict[str, Any]]:
        """Events with seq >= `after`, waiting up to `timeout` s for one when there are none."""
        with self._changed:
            if len(self.events) <= after and self.state not in FINISHED:
                self._changed.wait(timeout)
            return self.events[after:]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job is finished (tests, benchmarks); True when it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self.state not in FINISHED:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    @classmethod
    def restored(cls, row: dict[str, Any]) -> Job:
        """A finished job read back from storage (no events but its final one)."""
        job = cls(row["kind"], row["title"])
        job.id = row["id"]
        job.state = row["state"]
        job.progress = row["progress"]
        job.message = row["message"]
        job.result = row["result"]
        job.error = row["error"]
        job.created = row["created"]
        job.finished = row["finished"]
        job.events = [{"seq": 0, "event": job.state, "data": {"state": job.state, "message": job.message}}]
        return job

    def to_json(self) -> dict[str, Any]:
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


class JobManager:
    def __init__(
        self,
        max_workers: int = 2,
        keep: int = 200,
        *,
        max_queued: int | None = None,
        on_change: Callable[[Job], None] | None = None,
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="memplan-job")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._keep = keep
        self._max_workers = max_workers
        self._max_queued = max_queued
        self._on_change = on_change

    def submit(
        self, kind: str, title: str, work: Callable[[Job], dict[str, Any]], links: dict[str, str] | None = None
    ) -> Job:
        """Queue `work`; `QueueFull` when `max_queued` jobs already wait for a worker."""
        job = Job(kind, title, links)
        with self._lock:
            if self._max_queued is not None:
                active = sum(1 for j in self._jobs.values() if j.state in (QUEUED, RUNNING))
                if active >= self._max_workers + self._max_queued:
                    raise QueueFull(
                        f"{active} jobs are running or waiting, the most this service takes "
                        f"({self._max_workers} running + {self._max_queued} waiting); try again when one finishes"
                    )
            self._jobs[job.id] = job
            self._forget_old()
        self._changed(job)
        self._pool.submit(self._run, job, work)
        return job

    def cancel(self, job: Job) -> bool:
        """Ask a job to stop; True unless it had already finished. A queued job is cancelled at once."""
        with job._changed:
            if job.state in FINISHED:
                return False
            job.cancel_requested = True
            queued = job.state == QUEUED
        if queued:
            job.message = "cancelled before it started"
            job._set_state(CANCELLED)
            self._changed(job)
        return True

    def _changed(self, job: Job) -> None:
        if self._on_change is not None:
            self._on_change(job)

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, job: Job, work: Callable[[Job], dict[str, Any]]) -> None:
        with job._changed:  # re-entrant: _set_state takes it again
            if job.state != QUEUED:  # cancelled while it waited
                return
            job.message = "running"
            job._set_state(RUNNING)
        self._changed(job)
        try:
            self._finish(job, work)
        finally:
            self._changed(job)

    def _finish(self, job: Job, work: Callable[[Job], dict[str, Any]]) -> None:
        try:
            result = work(job)
        except JobCancelled:
            job.message = "cancelled while running"
            job._set_state(CANCELLED)
        except JobFailed as e:
            job.error = {"status": e.status, "detail": e.detail}
            job.message = e.detail
            job._set_state(FAILED, error=job.error)
        except Exception as e:  # a bug: keep the service up and show what happened
            job.error = {"status": 500, "detail": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)}
            job.message = job.error["detail"]
            job._set_state(FAILED, error=job.error)
        else:
            job.result = result
            job.progress = 1.0
            job.message = "done"
            job._set_state(DONE, result=result)

    def _forget_old(self) -> None:
        # Drop the oldest finished jobs beyond `keep`; running ones are never dropped.
        finished = [j for j in self._jobs.values() if j.state in FINISHED]
        for job in finished[: max(0, len(finished) - self._keep)]:
            del self._jobs[job.id]
