"""/api/v1/plans/{id}/notes: reviewers' notes on a plan, or on one of its tensors at a step."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.routes.deps import PagingDep, PlanHeadDep, StorageDep
from app.schemas import NoteOut, NoteRequest
from app.services import listings, notes

router = APIRouter(tags=["notes"])


@router.get("/notes")
def recent_notes(storage: StorageDep, paging: PagingDep) -> dict[str, Any]:
    """Notes on every plan, newest first, paged (`items`, `total`, `limit`, `offset`, `next`)."""
    return listings.notes(storage, limit=paging.limit, offset=paging.offset)


# Notes need a plan to exist, not its Plan JSON: a page polls them every few seconds.


@router.post("/plans/{plan_id}/notes", status_code=201, response_model=NoteOut)
def add_note(record: PlanHeadDep, body: NoteRequest, storage: StorageDep) -> dict[str, Any]:
    """Add a note to the plan (`tensor` and `step` both given: on that tensor at that step). The text is
    kept as written and always shown as text."""
    return notes.add(storage, record, body)


@router.get("/plans/{plan_id}/notes", response_model=list[NoteOut])
def list_notes(record: PlanHeadDep, storage: StorageDep) -> list[dict[str, Any]]:
    """The plan's notes, oldest first."""
    return notes.listing(storage, record)


@router.delete("/plans/{plan_id}/notes/{note_id}", status_code=204)
def delete_note(record: PlanHeadDep, note_id: str, storage: StorageDep) -> Response:
    notes.remove(storage, record, note_id)
    return Response(status_code=204)
