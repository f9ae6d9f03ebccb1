"""/api/v1/jobs: state, progress and result of long work, and its events as SSE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.jobs import FINISHED, Job
from app.routes.deps import JobDep, JobsDep
from app.schemas import JobOut

router = APIRouter(tags=["jobs"])

KEEPALIVE_S = 10.0


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job: JobDep) -> dict[str, Any]:
    return job.to_json()


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(job: JobDep, jobs: JobsDep) -> dict[str, Any]:
    """Stop a job: a queued one never starts, a running one stops at its next step; a finished one is left as is."""
    jobs.cancel(job)
    return job.to_json()


@router.get("/jobs/{job_id}/events")
async def job_events(job: JobDep, request: Request) -> StreamingResponse:
    """Server-sent events: `progress` while it works, then `done` or `failed`; the stream ends with the job.

    A reconnecting client sends `Last-Event-ID` and gets only what it missed.
    """
    last = request.headers.get("last-event-id", "")
    start = int(last) + 1 if last.isdigit() else 0
    return StreamingResponse(
        _stream(job, start, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _stream(job: Job, start: int, request: Request) -> AsyncIterator[str]:
    seq = start
    while True:
        events = await asyncio.to_thread(job.wait_events, seq, KEEPALIVE_S)
        for event in events:
            yield f"id: {event['seq']}\nevent: {event['event']}\ndata: {json.dumps(event['data'])}\n\n"
            seq = event["seq"] + 1
        if job.state in FINISHED and seq >= len(job.events):
            return
        if not events:
            if await request.is_disconnected():
                return
            yield ": keep-alive\n\n"
