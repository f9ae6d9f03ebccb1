"""Reviewers' notes on plans, kept in the `notes` table beside `app.storage`'s tables.

Notes read and write through `Storage`'s sessions (`Storage.writing()` is its one write
path), so they follow the same locking on SQLite and PostgreSQL. A note goes with its plan:
the foreign key deletes it when the plan (or the plan's model) is deleted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select

from app.db import NoteRow, PlanRow
from app.storage import Storage, new_id, rows_changed


@dataclass(frozen=True)
class NoteRecord:
    id: str
    plan_id: str
    text: str
    tensor: str | None  # a buffer id of the plan's problem; set together with step
    step: int | None
    author: str | None
    created: float  # seconds since the epoch

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "plan_id": self.plan_id,
            "text": self.text,
            "tensor": self.tensor,
            "step": self.step,
            "author": self.author,
            "created": self.created,
        }


class TooManyNotes(Exception):
    """The plan already holds `limit` notes."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def add_note(
    storage: Storage,
    plan_id: str,
    *,
    text: str,
    tensor: str | None,
    step: int | None,
    author: str | None,
    limit: int,
) -> NoteRecord:
    """Store a note (already checked against its plan); TooManyNotes when the plan has `limit` already."""
    row = NoteRow(id=new_id(), plan_id=plan_id, text=text, tensor=tensor, step=step, author=author, created=time.time())
    with storage.writing() as session:
        # The plan's row locked (PostgreSQL; SQLite has one writer anyway): two writers cannot both take the last place.
        session.execute(select(PlanRow.id).where(PlanRow.id == plan_id).with_for_update())
        count = session.scalar(select(func.count()).select_from(NoteRow).where(NoteRow.plan_id == plan_id)) or 0
        if count >= limit:
            raise TooManyNotes(limit)
        session.add(row)
    return _note(row)


def notes_of(storage: Storage, plan_id: str) -> list[NoteRecord]:
    """A plan's notes, oldest first (ties by id)."""
    query = select(NoteRow).where(NoteRow.plan_id == plan_id).order_by(NoteRow.created, NoteRow.id)
    with storage.reading() as session:
        return [_note(row) for row in session.scalars(query)]


def delete_note(storage: Storage, plan_id: str, note_id: str) -> bool:
    """Delete one of a plan's notes; False if the plan has no note with that id."""
    with storage.writing() as session:
        return rows_changed(session, delete(NoteRow).where(NoteRow.plan_id == plan_id, NoteRow.id == note_id)) == 1


def _note(row: NoteRow) -> NoteRecord:
    return NoteRecord(
        id=row.id,
        plan_id=row.plan_id,
        text=row.text,
        tensor=row.tensor,
        step=row.step,
        author=row.author,
        created=row.created,
    )
