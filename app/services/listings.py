"""Lists of what users made, newest first and paged, for the pages and the REST API: a model's plans
and runs, every plan, the pipelines and the sweeps. One page is {items, total, limit, offset, next}."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import load_only

from app.db import JobRow, ModelRow, NoteRow, PlanRow, ProblemRow, RunRow
from app.errors import AppError
from app.storage import Storage

DEFAULT_LIMIT = 20
MAX_LIMIT = 200
MAX_OFFSET = 2**63 - 1  # the largest integer SQLite and PostgreSQL take for OFFSET


def check_paging(limit: int, offset: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise AppError(422, f"limit: {limit} is out of range; accepted: 1 to {MAX_LIMIT}")
    if offset < 0:
        raise AppError(422, f"offset: {offset} is negative; accepted: 0 or more")
    if offset > MAX_OFFSET:
        raise AppError(422, f"offset: {offset} is out of range; accepted: 0 to {MAX_OFFSET:,}")


def _page(items: list[dict[str, Any]], total: int, limit: int, offset: int, base: str) -> dict[str, Any]:
    more = offset + len(items) < total
    return {
        "items": items,
        "total": total,
        "limit": limit,
        "offset": offset,
        "next": f"{base}?limit={limit}&offset={offset + limit}" if more else None,
    }


def _plan_item(plan: PlanRow, problem: ProblemRow, model_names: dict[str, str]) -> dict[str, Any]:
    options = problem.options or {}
    return {
        "id": plan.id,
        "strategy": plan.strategy,
        "arena_bytes": plan.arena_bytes,
        "lower_bound": plan.lower_bound,
        "valid": bool(plan.valid),
        "created": plan.created,
        "problem_id": plan.problem_id,
        "model_id": problem.model_id,
        "model": model_names.get(problem.model_id or ""),
        "dims": options.get("dims") or {},
        "shapes": options.get("shapes") or {},
        "pipeline": "pipeline" in options,
        "links": {"page": f"/plans/{plan.id}", "self": f"/api/v1/plans/{plan.id}"},
    }


def plans(storage: Storage, *, model_id: str | None = None, limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict:
    """Stored plans, newest first (of one model with `model_id`), without their placements."""
    check_paging(limit, offset)
    where = [PlanRow.problem_id == ProblemRow.id]
    if model_id is not None:
        where.append(ProblemRow.model_id == model_id)
    query = (
        select(PlanRow, ProblemRow)
        .where(*where)
        .options(
            load_only(
                PlanRow.id,
                PlanRow.strategy,
                PlanRow.arena_bytes,
                PlanRow.lower_bound,
                PlanRow.valid,
                PlanRow.created,
                PlanRow.problem_id,
                PlanRow.position,
            )
        )
        .options(load_only(ProblemRow.id, ProblemRow.model_id, ProblemRow.options))
        .order_by(PlanRow.created.desc(), PlanRow.position, PlanRow.id)
    )
    with storage.reading() as session:
        total = (
            session.scalar(
                select(func.count())
                .select_from(PlanRow)
                .join(ProblemRow, PlanRow.problem_id == ProblemRow.id)
                .where(*where[1:])
            )
            or 0
        )
        rows = session.execute(query.limit(limit).offset(offset)).all()
        names = dict(session.execute(select(ModelRow.id, ModelRow.name)).all())
        items = [_plan_item(plan, problem, names) for plan, problem in rows]
    base = f"/api/v1/models/{model_id}/plans" if model_id is not None else "/api/v1/plans"
    return _page(items, total, limit, offset, base)


def _run_item(row: RunRow) -> dict[str, Any]:
    result = row.result or {}
    verdict = result.get("verdict") or {}
    passed = verdict.get("passed")
    state = verdict.get("verdict") or ("skipped" if passed is None else "passed" if passed else "failed")
    return {
        "id": row.id,
        "model_id": row.model_id,
        "plan_id": row.plan_id,
        "strategy": result.get("strategy"),
        "arena_bytes": result.get("arena_bytes"),
        "seconds": result.get("seconds"),
        "verdict": state,
        "created": row.created,
        "links": {"page": f"/runs/{row.id}", "job": f"/api/v1/jobs/{row.id}"},
    }


def runs(storage: Storage, *, model_id: str, limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict[str, Any]:
    """A model's finished runs, newest first: strategy, arena, time and verdict of each."""
    check_paging(limit, offset)
    with storage.reading() as session:
        total = session.scalar(select(func.count()).select_from(RunRow).where(RunRow.model_id == model_id)) or 0
        query = select(RunRow).where(RunRow.model_id == model_id).order_by(RunRow.created.desc(), RunRow.id)
        items = [_run_item(r) for r in session.scalars(query.limit(limit).offset(offset))]
    return _page(items, total, limit, offset, f"/api/v1/models/{model_id}/runs")


def pipelines(storage: Storage, *, limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict[str, Any]:
    """Stored pipelines, newest first: their models, strategy and joint arena."""
    check_paging(limit, offset)
    query = (
        select(ProblemRow)
        .where(ProblemRow.model_id.is_(None))
        .options(load_only(ProblemRow.id, ProblemRow.options, ProblemRow.created))
        .order_by(ProblemRow.created.desc(), ProblemRow.id)
    )
    with storage.reading() as session:
        found = [(r.id, r.options, r.created) for r in session.scalars(query) if "pipeline" in (r.options or {})]
        names = dict(session.execute(select(ModelRow.id, ModelRow.name)).all())
        chosen = found[offset : offset + limit]
        joint = dict(
            session.execute(
                select(PlanRow.problem_id, PlanRow.arena_bytes).where(PlanRow.problem_id.in_([c[0] for c in chosen]))
            ).all()
        )
    items = []
    for pid, options, created in chosen:
        spec = options["pipeline"]
        models = {name: {"id": mid, "name": names.get(mid)} for name, mid in spec.get("models", {}).items()}
        items.append(
            {
                "id": pid,
                "name": " → ".join(m["name"] or m["id"] for m in models.values()),
                "models": models,
                "strategy": spec.get("strategy"),
                "joint_arena_bytes": joint.get(pid),
                "separate_total_bytes": sum((options.get("separate_arena_bytes") or {}).values()),
                "created": created,
                "links": {"page": f"/pipelines/{pid}", "self": f"/api/v1/pipelines/{pid}"},
            }
        )
    return _page(items, len(found), limit, offset, "/api/v1/pipelines")


def sweeps(storage: Storage, *, limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict[str, Any]:
    """Sweep jobs, newest first: title, state and progress."""
    check_paging(limit, offset)
    where = JobRow.kind == "sweep"
    with storage.reading() as session:
        total = session.scalar(select(func.count()).select_from(JobRow).where(where)) or 0
        query = (
            select(JobRow)
            .where(where)
            .options(load_only(JobRow.id, JobRow.title, JobRow.state, JobRow.progress, JobRow.created, JobRow.finished))
            .order_by(JobRow.created.desc(), JobRow.id)
        )
        items = [
            {
                "id": r.id,
                "title": r.title,
                "state": r.state,
                "progress": r.progress,
                "created": r.created,
                "finished": r.finished,
                "links": {"page": f"/sweeps/{r.id}", "self": f"/api/v1/sweeps/{r.id}"},
            }
            for r in session.scalars(query.limit(limit).offset(offset))
        ]
    return _page(items, total, limit, offset, "/api/v1/sweeps")


def earlier_work(storage: Storage, model_id: str, *, plans_offset: int = 0, runs_offset: int = 0) -> dict[str, Any]:
    """A model page's lists: its plans and its runs, ten of each a page."""
    return {
        "plans": plans(storage, model_id=model_id, limit=10, offset=plans_offset),
        "runs": runs(storage, model_id=model_id, limit=10, offset=runs_offset),
    }


def notes(storage: Storage, *, limit: int = DEFAULT_LIMIT, offset: int = 0) -> dict[str, Any]:
    """Reviewers' notes on every plan, newest first: the text, the tensor and step it is on, and its plan."""
    check_paging(limit, offset)
    with storage.reading() as session:
        total = session.scalar(select(func.count()).select_from(NoteRow)) or 0
        query = (
            select(NoteRow, PlanRow.strategy)
            .join(PlanRow, NoteRow.plan_id == PlanRow.id)
            .order_by(NoteRow.created.desc(), NoteRow.id)
        )
        items = [
            {
                "id": note.id,
                "plan_id": note.plan_id,
                "strategy": strategy,
                "text": note.text,
                "tensor": note.tensor,
                "step": note.step,
                "author": note.author,
                "created": note.created,
                "links": {"page": f"/plans/{note.plan_id}", "notes": f"/api/v1/plans/{note.plan_id}/notes"},
            }
            for note, strategy in session.execute(query.limit(limit).offset(offset)).all()
        ]
    return _page(items, total, limit, offset, "/api/v1/notes")
