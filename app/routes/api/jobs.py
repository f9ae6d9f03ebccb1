"""/api/v1/jobs: state, progress and result of long work, and its events as SSE.

Everything is read from the database, so any app process shows, streams or cancels any job,
whichever process submitted it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.jobs import FINISHED, JobService
from app.routes.deps import JobDep, JobsDep
from app.schemas import JobOut

router = APIRouter(tags=["jobs"])

KEEPALIVE_S = 10.0
POLL_S = 0.2  # how often a stream looks for new events
STATE_S = 1.0  # and, while none come, how often it reads the job's state


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job: JobDep) -> dict[str, Any]:
    return job.to_json()


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(job: JobDep, jobs: JobsDep) -> dict[str, Any]:
    """Stop a job: a queued one never starts, a running one stops at its next step; a finished one is left as is."""
    return (jobs.cancel(job.id) or job).to_json()


@router.get("/jobs/{job_id}/events")
async def job_events(job: JobDep, jobs: JobsDep, request: Request) -> StreamingResponse:
    """Server-sent events: `progress` while it works, then `done` or `failed`; the stream ends with the job.

    A reconnecting client sends `Last-Event-ID` and gets only what it missed.
    """
    last = request.headers.get("last-event-id", "")
    after = int(last) if last.isdigit() else -1
    return StreamingResponse(
        _stream(jobs, job.id, after, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(jobs: JobService, job_id: str, after: int, request: Request) -> AsyncIterator[str]:
    quiet_since, checked = time.monotonic(), 0.0
    finished_seen = False  # the row said finished: its final event is written right after it
    while True:
        events = await asyncio.to_thread(jobs.events, job_id, after)
        for event in events:
            yield f"id: {event['seq']}\nevent: {event['event']}\ndata: {json.dumps(event['data'])}\n\n"
            after = event["seq"]
            if event["event"] in FINISHED:
                await _row_finished(jobs, job_id)
                return
        now = time.monotonic()
        if events:
            quiet_since = now
            continue
        if finished_seen:  # and no final event since (sent before Last-Event-ID, or never kept)
            return
        if now - checked >= STATE_S:
            checked = now
            job = await asyncio.to_thread(jobs.get, job_id)  # also fails a job whose worker was lost
            if job is None:
                return
            finished_seen = job.is_finished
        if await request.is_disconnected():
            return
        if now - quiet_since >= KEEPALIVE_S:
            quiet_since = now
            yield ": keep-alive\n\n"
        await asyncio.sleep(POLL_S)


async def _row_finished(jobs: JobService, job_id: str, patience: float = 5.0) -> None:
    """Wait until the job's row says finished too (it is written just after the final event), so that a
    client reading the job when its stream ends finds the outcome there."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        job = await asyncio.to_thread(jobs.get, job_id)
        if job is None or job.is_finished:
            return
        await asyncio.sleep(0.02)
