"""Storage: model files by SHA-256 on disk, metadata in a database through SQLAlchemy 2.

Layout of the data directory::

    memplan.sqlite3          the default database (WAL mode): models, problems, plans, runs, jobs
    blobs/ab/abcdef....onnx  one file per distinct content (a .zip when it carries external data)
    incoming/                uploads being streamed, renamed into blobs/ when complete

The database is the SQLite file above unless a URL is given (`MEMPLAN_DATABASE_URL`, e.g.
``postgresql+psycopg://memplan@db:5432/memplan`` for a team). Its tables are the typed models
of `app.db`; opening storage migrates the database to the newest Alembic revision
(`app.migrations`). A database that cannot be reached raises `DatabaseUnavailable`.

Every change goes through `Storage._write`, one transaction per call: on SQLite it is
serialised with every other writer (one lock in the process, BEGIN IMMEDIATE across
processes); on PostgreSQL the database's own locks order concurrent writers.

Durability: an upload is written under incoming/, renamed into blobs/ when complete, and
only then recorded in one transaction, so a model is visible whole or not at all. If the
process dies on the way, `recover()` (run when storage opens) deletes what is left in
incoming/ and blobs no record refers to, and (only when this process owns the jobs, see
`Storage`) marks jobs that were queued or running as interrupted.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Executable, delete, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, defer, sessionmaker

from app import migrations
from app.db import IMMEDIATE, JobEventRow, JobRow, ModelRow, PlanRow, ProblemRow, RunRow, open_engine, public_url
from app.records import JobRecord, ModelRecord, PlanRecord, ProblemRecord, RunRecord

UNFINISHED_JOB_STATES = ("queued", "running")
# The job columns `update_job` may change.
JOB_FIELDS = ("state", "progress", "message", "result", "error", "finished", "heartbeat", "worker", "attempts")
# With a shared database, files younger than this may belong to another process's upload in flight.
SHARED_GRACE_SECONDS = 600.0


def new_id() -> str:
    return secrets.token_hex(6)


class DatabaseUnavailable(RuntimeError):
    """The database could not be opened or migrated; the message names the URL (no password) and the cause."""


class Storage:
    """Blobs under `data_dir`, metadata in `database_url` (default: SQLite in `data_dir`).

    `owns_jobs`: this process is the only one running jobs on this database, so jobs left
    queued or running were this process's and died with it: `recover()` marks them
    interrupted. Default: True for the default SQLite file, False for a database URL (other
    app processes and their workers may be running those jobs).
    """

    def __init__(self, data_dir: Path, database_url: str | None = None, *, owns_jobs: bool | None = None) -> None:
        self.root = Path(data_dir)
        self.blobs = self.root / "blobs"
        self.incoming = self.root / "incoming"
        for folder in (self.root, self.blobs, self.incoming):
            folder.mkdir(parents=True, exist_ok=True)
        self.db_path: Path | None = self.root / "memplan.sqlite3" if database_url is None else None
        self.url = database_url or f"sqlite:///{self.db_path}"
        self.owns_jobs = database_url is None if owns_jobs is None else owns_jobs
        try:
            shown = public_url(self.url)
        except SQLAlchemyError:  # not a URL: echo none of it, it may hold a password
            raise DatabaseUnavailable(
                "MEMPLAN_DATABASE_URL is not a database URL; expected e.g. sqlite:////data/memplan.sqlite3 "
                "or postgresql+psycopg://user:password@host:5432/memplan"
            ) from None
        try:
            self._engine = open_engine(self.url)
        except (SQLAlchemyError, ImportError) as e:  # an unknown or missing driver
            raise DatabaseUnavailable(f"cannot open the database {shown}: {one_line(e)}") from e
        self._sqlite = self._engine.dialect.name == "sqlite"
        # SQLite has one writer at a time anyway: queue this process's writers here, not in its busy handler.
        self._lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if self._sqlite else contextlib.nullcontext()
        )
        self._reader = sessionmaker(self._engine)
        self._writer = sessionmaker(self._engine.execution_options(**{IMMEDIATE: True}), expire_on_commit=False)
        self._migrate()
        self.recovered = self.recover()

    def _migrate(self) -> None:
        try:
            with self._lock, self._writer.begin() as session:
                if not self._sqlite:  # openers queue here, so only one of them migrates
                    session.execute(select(func.pg_advisory_xact_lock(0x6D656D706C616E)))
                migrations.upgrade(session.connection())
        except SQLAlchemyError as e:
            self._engine.dispose()
            raise DatabaseUnavailable(f"cannot open the database {public_url(self.url)}: {one_line(e)}") from e

    def close(self) -> None:
        self._engine.dispose()

    # ---- the one write path ------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[Session]:
        """A session whose changes commit together when the block ends (or roll back if it raises)."""
        with self._lock, self._writer.begin() as session:
            yield session

    def writing(self) -> contextlib.AbstractContextManager[Session]:
        """`_write` for the stores of other tables kept beside this module (`app.notes`)."""
        return self._write()

    def reading(self) -> Session:
        """A session to read with, for the same stores: `with storage.reading() as session: ...`."""
        return self._reader()

    # ---- after a crash -------------------------------------------------------------------

    def recover(self) -> dict[str, int]:
        """Remove what a killed process left half-done; counts of what was cleaned.

        With a shared database (`owns_jobs` False) other processes may be mid-upload: only
        files untouched for `SHARED_GRACE_SECONDS` are removed, and no job is touched.
        """
        cutoff = time.time() - SHARED_GRACE_SECONDS

        def in_flight(path: Path) -> bool:
            return not self.owns_jobs and path.stat().st_mtime > cutoff

        partial = 0
        for leftover in self.incoming.iterdir():
            if in_flight(leftover):
                continue
            partial += 1
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        with self._reader() as session:
            known = {(sha, fmt) for sha, fmt in session.execute(select(ModelRow.sha256, ModelRow.format))}
        orphans = 0
        for blob in self.blobs.glob("*/*"):
            if blob.is_file() and (blob.stem, blob.suffix.lstrip(".")) not in known and not in_flight(blob):
                blob.unlink(missing_ok=True)
                orphans += 1
        interrupted = 0
        if self.owns_jobs:
            with self._write() as session:
                for job in session.scalars(select(JobRow).where(JobRow.state.in_(UNFINISHED_JOB_STATES))):
                    job.message = f"interrupted: the service stopped while this job was {job.state}"
                    job.state, job.finished = "interrupted", time.time()
                    interrupted += 1
        return {"partial_uploads": partial, "orphan_blobs": orphans, "interrupted_jobs": interrupted}

    # ---- jobs ----------------------------------------------------------------------------

    def create_job(self, *, job_id: str, kind: str, title: str, links: dict[str, str], created: float) -> None:
        """A new job, queued: progress 0, "waiting for a worker"."""
        with self._write() as session:
            session.add(
                JobRow(
                    id=job_id,
                    kind=kind,
                    title=title,
                    state="queued",
                    progress=0.0,
                    message="waiting for a worker",
                    created=created,
                    links=links,
                )
            )

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Change some of a job's columns (`JOB_FIELDS`); result and error are dicts or None."""
        unknown = sorted(set(fields) - set(JOB_FIELDS))
        if unknown:
            raise ValueError(f"update_job: unknown field(s) {unknown}; accepted: {', '.join(JOB_FIELDS)}")
        if not fields:
            return
        with self._write() as session:
            if rows_changed(session, update(JobRow).where(JobRow.id == job_id).values(**fields)) != 1:
                raise KeyError(f"no job {job_id!r}")

    def get_job(self, job_id: str) -> JobRecord | None:
        """A job's record (result/error/links decoded); None if unknown."""
        with self._reader() as session:
            row = session.get(JobRow, job_id)
            return _job(row) if row else None

    def add_job_event(self, *, job_id: str, event: str, data: dict[str, Any]) -> int:
        """Append an event to a job; its seq, 0, 1, 2, ... per job, even with several processes writing."""
        return self.add_job_events(job_id=job_id, event=event, datas=[data])[0]

    def add_job_events(self, *, job_id: str, event: str, datas: list[dict[str, Any]]) -> list[int]:
        """Append events of one kind to a job in one transaction, in order; their seqs (consecutive)."""
        with self._write() as session:
            # The UPDATE locks the job's row (PostgreSQL) or the database (SQLite) until commit: one seq each.
            bumped = update(JobRow).where(JobRow.id == job_id).values(next_seq=JobRow.next_seq + len(datas))
            first = session.scalar(bumped.returning(JobRow.next_seq - len(datas)))
            if first is None:
                raise KeyError(f"no job {job_id!r}")
            session.add_all(JobEventRow(job_id=job_id, seq=first + k, event=event, data=d) for k, d in enumerate(datas))
        return list(range(int(first), int(first) + len(datas)))

    def job_events(self, job_id: str, *, after: int = -1, limit: int = 1000) -> list[dict[str, Any]]:
        """A job's events with seq > after, in order: [{"seq", "event", "data"}]."""
        query = (
            select(JobEventRow)
            .where(JobEventRow.job_id == job_id, JobEventRow.seq > after)
            .order_by(JobEventRow.seq)
            .limit(limit)
        )
        with self._reader() as session:
            return [{"seq": e.seq, "event": e.event, "data": e.data} for e in session.scalars(query)]

    def request_cancel(self, job_id: str) -> bool:
        """Ask a job to stop; False if it is unknown or already finished."""
        query = (
            update(JobRow)
            .where(JobRow.id == job_id, JobRow.finished.is_(None), JobRow.state.in_(UNFINISHED_JOB_STATES))
            .values(cancel_requested=True)
        )
        with self._write() as session:
            return rows_changed(session, query) == 1

    def count_jobs(self, states: tuple[str, ...]) -> int:
        with self._reader() as session:
            return session.scalar(select(func.count()).select_from(JobRow).where(JobRow.state.in_(states))) or 0

    def jobs_in(self, states: tuple[str, ...]) -> list[JobRecord]:
        """Jobs in any of these states, oldest first (the reaper looks for dead workers' jobs)."""
        query = select(JobRow).where(JobRow.state.in_(states)).order_by(JobRow.created, JobRow.id)
        with self._reader() as session:
            return [_job(row) for row in session.scalars(query)]

    # ---- model files -------------------------------------------------------------------

    def blob_path(self, sha256: str, fmt: str) -> Path:
        return self.blobs / sha256[:2] / f"{sha256}.{fmt}"

    def incoming_path(self) -> Path:
        return self.incoming / f"{new_id()}.part"

    def keep_blob(self, temp: Path, sha256: str, fmt: str) -> Path:
        """Move a complete upload into place; a second copy of the same content is dropped."""
        target = self.blob_path(sha256, fmt)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            temp.unlink(missing_ok=True)
        else:
            os.replace(temp, target)  # atomic: readers never see a half-written blob
        return target

    # ---- models ------------------------------------------------------------------------

    def add_model(
        self, *, sha256: str, name: str, filename: str, fmt: str, size: int, summary: dict[str, Any]
    ) -> tuple[ModelRecord, bool]:
        """Insert a model unless its content is already stored; (record, created)."""
        model_id = sha256[:16]
        before = self.get_model(model_id)
        if before is not None:
            return before, False
        row = ModelRow(
            id=model_id,
            sha256=sha256,
            name=name,
            filename=filename,
            format=fmt,
            bytes=size,
            created=time.time(),
            summary=summary,
        )
        try:
            with self._write() as session:
                session.add(row)
        except IntegrityError:  # the same content, stored by another request in the meantime
            record = self.get_model(model_id)
            assert record is not None
            return record, False
        return _model(row), True

    def get_model(self, model_id: str) -> ModelRecord | None:
        with self._reader() as session:
            row = session.get(ModelRow, model_id)
            return _model(row) if row else None

    def list_models(self) -> list[ModelRecord]:
        with self._reader() as session:
            return [_model(r) for r in session.scalars(select(ModelRow).order_by(ModelRow.created.desc(), ModelRow.id))]

    def delete_model(self, model_id: str) -> bool:
        record = self.get_model(model_id)
        if record is None:
            return False
        problems = select(ProblemRow.id).where(ProblemRow.model_id == model_id).scalar_subquery()
        with self._write() as session:
            session.execute(delete(PlanRow).where(PlanRow.problem_id.in_(problems)))
            session.execute(delete(ProblemRow).where(ProblemRow.model_id == model_id))
            session.execute(delete(RunRow).where(RunRow.model_id == model_id))
            session.execute(delete(ModelRow).where(ModelRow.id == model_id))
        self.blob_path(record.sha256, record.format).unlink(missing_ok=True)
        return True

    def model_file(self, record: ModelRecord) -> Path:
        return self.blob_path(record.sha256, record.format)

    # ---- problems and plans ------------------------------------------------------------

    def add_problem(
        self,
        *,
        problem: dict[str, Any],
        options: dict[str, Any],
        model_id: str | None,
        tensors: dict[str, Any] | None = None,
    ) -> ProblemRecord:
        """Store a planned problem with the options that made it and per-tensor facts for charts."""
        row = ProblemRow(
            id=new_id(), model_id=model_id, options=options, problem=problem, tensors=tensors or {}, created=time.time()
        )
        with self._write() as session:
            session.add(row)
        return _problem(row)

    def get_problem(self, problem_id: str, *, content: bool = True) -> ProblemRecord | None:
        """A stored problem, or None; with `content` False the problem and its tensor facts are not
        read (tens of MB at 10^6 buffers): both are None."""
        deferred = [] if content else [defer(ProblemRow.problem), defer(ProblemRow.tensors)]
        with self._reader() as session:
            row = session.get(ProblemRow, problem_id, options=deferred)
            return _problem(row, content) if row else None

    def add_plans(self, *, problem_id: str, plans: list[PlanRecord]) -> None:
        now = time.time()
        with self._write() as session:
            session.add_all(
                PlanRow(
                    id=p.id,
                    problem_id=problem_id,
                    strategy=p.strategy,
                    arena_bytes=p.arena_bytes,
                    lower_bound=p.lower_bound,
                    naive_bytes=p.naive_bytes,
                    seconds=p.seconds,
                    valid=p.valid,
                    violations=p.violations,
                    plan=p.plan,
                    created=now,
                    position=position,
                )
                for position, p in enumerate(plans)
            )

    def get_plan(self, plan_id: str, *, placements: bool = True) -> PlanRecord | None:
        """A plan; with `placements` False its Plan JSON is not read (tens of MB at 10^6 buffers): `plan` is {}."""
        with self._reader() as session:
            row = session.get(PlanRow, plan_id, options=[] if placements else [defer(PlanRow.plan)])
            return _plan(row, placements) if row else None

    def plans_of(self, problem_id: str, *, placements: bool = True) -> list[PlanRecord]:
        """A problem's plans in the order they were added (`placements` as `get_plan`)."""
        query = (
            select(PlanRow)
            .where(PlanRow.problem_id == problem_id)
            .order_by(PlanRow.created, PlanRow.position, PlanRow.id)
        )
        if not placements:
            query = query.options(defer(PlanRow.plan))
        with self._reader() as session:
            return [_plan(r, placements) for r in session.scalars(query)]

    # ---- runs --------------------------------------------------------------------------

    def add_run(self, *, run_id: str, model_id: str | None, plan_id: str | None, result: dict[str, Any]) -> RunRecord:
        """Store a run's result (a run stored again under the same id replaces it)."""
        row = RunRow(id=run_id, model_id=model_id, plan_id=plan_id, result=result, created=time.time())
        with self._write() as session:
            session.merge(row)
        return _run(row)

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._reader() as session:
            row = session.get(RunRow, run_id)
            return _run(row) if row else None


def _model(row: ModelRow) -> ModelRecord:
    return ModelRecord(
        id=row.id,
        sha256=row.sha256,
        name=row.name,
        filename=row.filename,
        format=row.format,
        bytes=row.bytes,
        created=row.created,
        summary=row.summary,
    )


def _problem(row: ProblemRow, content: bool = True) -> ProblemRecord:
    return ProblemRecord(
        id=row.id,
        model_id=row.model_id,
        options=row.options,
        problem=row.problem if content else None,
        tensors=row.tensors if content else None,
        created=row.created,
    )


def _run(row: RunRow) -> RunRecord:
    return RunRecord(id=row.id, model_id=row.model_id, plan_id=row.plan_id, result=row.result, created=row.created)


def _plan(row: PlanRow, placements: bool = True) -> PlanRecord:
    return PlanRecord(
        id=row.id,
        problem_id=row.problem_id,
        strategy=row.strategy,
        arena_bytes=row.arena_bytes,
        lower_bound=row.lower_bound,
        naive_bytes=row.naive_bytes,
        seconds=row.seconds,
        valid=bool(row.valid),
        violations=row.violations,
        plan=row.plan if placements else {},
    )


def _job(row: JobRow) -> JobRecord:
    """Every column but next_seq (bookkeeping for add_job_event)."""
    return JobRecord(
        id=row.id,
        kind=row.kind,
        title=row.title,
        state=row.state,
        progress=row.progress,
        message=row.message,
        result=row.result,
        error=row.error,
        links=row.links or {},
        created=row.created,
        finished=row.finished,
        heartbeat=row.heartbeat,
        worker=row.worker,
        attempts=row.attempts or 0,
        cancel_requested=bool(row.cancel_requested),
    )


def rows_changed(session: Session, statement: Executable) -> int:
    """Run an UPDATE or DELETE; how many rows it changed."""
    return cast(CursorResult[Any], session.execute(statement)).rowcount


def one_line(error: BaseException) -> str:
    """A driver's message on one line (psycopg's span several), without SQLAlchemy's link to its docs."""
    text = str(getattr(error, "orig", None) or error)
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", text)
    return " ".join(text.split()) or type(error).__name__
