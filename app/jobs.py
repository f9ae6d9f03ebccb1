"""A small in-process job manager: long work (slow strategies, runs) on a few threads.

A job runs `work(job)`; the work reports progress through `job.report(...)`, which both
updates the job's state and appends an event for server-sent-event listeners. At most
`max_workers` jobs run at once; the rest wait in line in submission order.
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
FINISHED = (DONE, FAILED)


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
        self._changed = threading.Condition()

    # ---- called by the work --------------------------------------------------------------

    def report(self, progress: float | None = None, message: str | None = None, **data: Any) -> None:
        """Record progress (0..1) and a message; `data` goes into the event for listeners."""
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
    def __init__(self, max_workers: int = 2, keep: int = 200) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="memplan-job")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._keep = keep

    def submit(
        self, kind: str, title: str, work: Callable[[Job], dict[str, Any]], links: dict[str, str] | None = None
    ) -> Job:
        job = Job(kind, title, links)
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old()
        self._pool.submit(self._run, job, work)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, job: Job, work: Callable[[Job], dict[str, Any]]) -> None:
        job.message = "running"
        job._set_state(RUNNING)
        try:
            result = work(job)
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
