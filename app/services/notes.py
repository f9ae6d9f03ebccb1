"""Reviewers' notes on a plan: checked against the plan (its tensors, its steps), stored by
`app.notes`, and shaped for the API, the plan page and the offline report."""

from __future__ import annotations

import difflib
import time
from typing import Any

from app import notes
from app.errors import AppError
from app.schemas import NOTE_AUTHOR_MAX, NOTE_TEXT_MAX, NoteRequest
from app.services.plans import problem_of
from app.storage import PlanRecord, Storage
from planner import Problem

NOTES_PER_PLAN = 500  # every note is drawn on the plan's page and report: keep those light
SUGGEST_AMONG = 20_000  # tensors: close names are suggested for a typo up to this many


def add(storage: Storage, record: PlanRecord, body: NoteRequest) -> dict[str, Any]:
    """A new note on the plan, after checking its text, author, tensor and step (422 naming the field)."""
    for field, value in (("text", body.text), ("author", body.author or "")):
        _storable(field, value)
    text = body.text.strip()
    if not text:
        raise AppError(422, f"text: a note needs some text, 1 to {NOTE_TEXT_MAX:,} characters; got none")
    if len(text) > NOTE_TEXT_MAX:
        raise AppError(
            422,
            f"text: a note is at most {NOTE_TEXT_MAX:,} characters (spaces around it not counted); got {len(text):,}",
        )
    author = (body.author or "").strip() or None
    if author is not None and len(author) > NOTE_AUTHOR_MAX:
        raise AppError(422, f"author: at most {NOTE_AUTHOR_MAX} characters; got {len(author):,}")
    if (body.tensor is None) != (body.step is None):
        raise AppError(
            422,
            "tensor and step go together: give both (a note on a tensor at a step) or neither (a note on the plan)",
        )
    if body.tensor is not None and body.step is not None:
        problem, _ = problem_of(storage, record)
        _check_tensor(problem, record.id, body.tensor)
        _check_step(problem, body.step)
    try:
        note = notes.add_note(
            storage, record.id, text=text, tensor=body.tensor, step=body.step, author=author, limit=NOTES_PER_PLAN
        )
    except notes.TooManyNotes as e:
        raise AppError(409, f"plan {record.id!r} has {e.limit} notes, the most it keeps; delete some first") from None
    return note.to_json()


def listing(storage: Storage, record: PlanRecord) -> list[dict[str, Any]]:
    """The plan's notes, oldest first."""
    return [n.to_json() for n in notes.notes_of(storage, record.id)]


def page_notes(storage: Storage, record: PlanRecord) -> list[dict[str, Any]]:
    """The notes as the plan page and the report list them: each with `when`, its time in UTC, and
    a note on a tensor this plan places with `at`, [offset, size] (a big plan's page holds only its
    largest tensors: the chart finds the others by this)."""
    listed = listing(storage, record)
    wanted = {note["tensor"] for note in listed if note["tensor"] is not None}
    at = _positions(storage, record, wanted) if wanted and record.plan else {}
    return [
        {**note, "when": when(note["created"]), **({"at": at[note["tensor"]]} if note["tensor"] in at else {})}
        for note in listed
    ]


def _positions(storage: Storage, record: PlanRecord, wanted: set[str]) -> dict[str, list[int]]:
    """[offset, size] in the plan of each tensor in `wanted` that it places."""
    problem, _ = problem_of(storage, record)
    sizes = {b.id: b.size for b in problem.buffers if b.id in wanted}
    offsets = {p["id"]: p["offset"] for p in record.plan.get("placements", []) if p["id"] in wanted}
    return {t: [offsets[t], sizes[t]] for t in sorted(wanted) if t in offsets and t in sizes}


def when(created: float) -> str:
    """'2026-11-24 01:02 UTC': the same format as the page's script writes."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(created))


def remove(storage: Storage, record: PlanRecord, note_id: str) -> None:
    if not notes.delete_note(storage, record.id, note_id):
        raise AppError(
            404,
            f"plan {record.id!r} has no note with id {note_id!r}; list them at /api/v1/plans/{record.id}/notes",
            title="Unknown note",
        )


def _storable(field: str, value: str) -> None:
    """Text both databases keep as sent: UTF-8 (no lone surrogate from a JSON escape), no NUL (PostgreSQL)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise AppError(
            422,
            f"{field}: character {e.start} is a lone surrogate (\\u{ord(value[e.start]):04x}); accepted: valid Unicode",
        ) from None
    if "\x00" in value:
        raise AppError(422, f"{field}: contains a NUL character (\\u0000); accepted: any other text")


def _check_tensor(problem: Problem, plan_id: str, tensor: str) -> None:
    ids = [b.id for b in problem.buffers]
    if tensor in set(ids):
        return
    close = difflib.get_close_matches(tensor, ids, n=3) if len(ids) <= SUGGEST_AMONG else []
    if close:
        hint = f"; did you mean {', '.join(map(repr, close))}?"
    else:
        hint = f", e.g. {', '.join(map(repr, ids[:3]))}" if ids else ""
    shown = tensor if len(tensor) <= 80 else tensor[:80] + "…"
    raise AppError(
        422,
        f"tensor: {shown!r} is not a tensor of this plan; accepted: one of its {len(ids):,} tensor ids "
        f"(the `id` of each of `buffers` in GET /api/v1/plans/{plan_id}){hint}",
    )


def _check_step(problem: Problem, step: int) -> None:
    if 0 <= step < problem.steps:
        return
    accepted = f"0 to {problem.steps - 1}" if problem.steps else "none: this plan has no steps"
    raise AppError(422, f"step: {step} is not a step of this plan; accepted: {accepted}")
