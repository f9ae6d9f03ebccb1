"""Storage: model files by SHA-256 on disk, metadata in SQLite.

Layout of the data directory::

    memplan.sqlite3          models, problems, plans, runs
    blobs/ab/abcdef....onnx  one file per distinct content (a .zip when it carries external data)
    incoming/                uploads being streamed, renamed into blobs/ when complete

Every change goes through `Storage._write`, one connection guarded by one lock, so
concurrent requests never interleave half-done writes. Reads use short-lived connections.

Durability: an upload is written under incoming/, renamed into blobs/ when complete, and
only then recorded in one SQLite transaction, so a model is visible whole or not at all.
If the process dies on the way, `recover()` (run when storage opens) deletes what is left
in incoming/, blobs no record refers to, and marks jobs that were queued or running as
interrupted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY, sha256 TEXT UNIQUE NOT NULL, name TEXT NOT NULL, filename TEXT NOT NULL,
    format TEXT NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL, summary TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS problems (
    id TEXT PRIMARY KEY, model_id TEXT REFERENCES models(id) ON DELETE CASCADE,
    options TEXT NOT NULL, problem TEXT NOT NULL, tensors TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS plans (
    id TEXT PRIMARY KEY, problem_id TEXT NOT NULL REFERENCES problems(id) ON DELETE CASCADE,
    strategy TEXT NOT NULL, arena_bytes INTEGER NOT NULL, lower_bound INTEGER NOT NULL,
    naive_bytes INTEGER NOT NULL, seconds REAL NOT NULL, valid INTEGER NOT NULL,
    violations TEXT NOT NULL, plan TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, model_id TEXT REFERENCES models(id) ON DELETE CASCADE,
    plan_id TEXT, result TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, title TEXT NOT NULL, state TEXT NOT NULL,
    progress REAL NOT NULL, message TEXT NOT NULL, result TEXT, error TEXT,
    created REAL NOT NULL, finished REAL
);
CREATE TABLE IF NOT EXISTS job_events (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    event TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (job_id, seq)
);
CREATE INDEX IF NOT EXISTS plans_by_problem ON plans(problem_id);
"""

UNFINISHED_JOB_STATES = ("queued", "running")
# Columns added to jobs for the job engine: (name, definition) for ALTER TABLE on older files.
JOB_COLUMNS = (
    ("links", "TEXT NOT NULL DEFAULT '{}'"),
    ("heartbeat", "REAL"),
    ("worker", "TEXT"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("cancel_requested", "INTEGER NOT NULL DEFAULT 0"),
    ("next_seq", "INTEGER NOT NULL DEFAULT 0"),
)
JOB_FIELDS = ("state", "progress", "message", "result", "error", "finished", "heartbeat", "worker", "attempts")
JSON_JOB_FIELDS = ("result", "error")


def new_id() -> str:
    return secrets.token_hex(6)


@dataclass(frozen=True)
class ModelRecord:
    id: str
    sha256: str
    name: str
    filename: str
    format: str  # "onnx" or "zip"
    bytes: int
    created: float
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "sha256": self.sha256,
            "filename": self.filename,
            "format": self.format,
            "bytes": self.bytes,
            "created": self.created,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class PlanRecord:
    id: str
    problem_id: str
    strategy: str
    arena_bytes: int
    lower_bound: int
    naive_bytes: int
    seconds: float
    valid: bool
    violations: list[str]
    plan: dict[str, Any]  # the planner's Plan JSON


class Storage:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir)
        self.blobs = self.root / "blobs"
        self.incoming = self.root / "incoming"
        for folder in (self.root, self.blobs, self.incoming):
            folder.mkdir(parents=True, exist_ok=True)
        self.db_path = self.root / "memplan.sqlite3"
        self._lock = threading.Lock()
        self._conn = self._connect()
        with self._lock:
            self._conn.executescript(SCHEMA)
            have = {r["name"] for r in self._conn.execute("PRAGMA table_info(jobs)")}
            for name, definition in JOB_COLUMNS:
                if name not in have:
                    self._conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {definition}")
        self.recovered = self.recover()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, check_same_thread=False, timeout=30)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ---- the one write path ------------------------------------------------------------

    def _write(self, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
        """Run statements in one transaction, serialised with every other write; rows changed."""
        changed = 0
        with self._lock, self._conn:
            for sql, params in statements:
                changed += self._conn.execute(sql, params).rowcount
        return changed

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.db_path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    # ---- after a crash -------------------------------------------------------------------

    def recover(self) -> dict[str, int]:
        """Remove what a killed process left half-done; counts of what was cleaned."""
        partial = 0
        for leftover in self.incoming.iterdir():
            partial += 1
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        with self._read() as conn:
            known = {(r["sha256"], r["format"]) for r in conn.execute("SELECT sha256, format FROM models")}
        orphans = 0
        for blob in self.blobs.glob("*/*"):
            if blob.is_file() and (blob.stem, blob.suffix.lstrip(".")) not in known:
                blob.unlink(missing_ok=True)
                orphans += 1
        interrupted = self._write(
            [
                (
                    "UPDATE jobs SET state = 'interrupted', finished = ?, "
                    "message = 'interrupted: the service stopped while this job was ' || state "
                    "WHERE state IN (?, ?)",
                    (time.time(), *UNFINISHED_JOB_STATES),
                )
            ]
        )
        return {"partial_uploads": partial, "orphan_blobs": orphans, "interrupted_jobs": interrupted}

    # ---- jobs ----------------------------------------------------------------------------

    def save_job(self, job: dict[str, Any]) -> None:
        """Record a job's state (the `Job.to_json()` fields); called on every change of state."""
        saved = ("id", "kind", "title", "state", "progress", "message", "result", "error", "created", "finished")
        values = {c: _dumps(job[c]) if c in JSON_JOB_FIELDS else job[c] for c in saved}
        columns = ", ".join(values)
        updates = ", ".join(f"{c} = excluded.{c}" for c in values if c != "id")
        self._write(
            [
                (
                    f"INSERT INTO jobs ({columns}) VALUES ({', '.join('?' * len(values))}) "
                    f"ON CONFLICT(id) DO UPDATE SET {updates}",
                    tuple(values.values()),
                )
            ]
        )

    def create_job(self, *, job_id: str, kind: str, title: str, links: dict[str, str], created: float) -> None:
        """A new job, queued: progress 0, "waiting for a worker"."""
        sql = "INSERT INTO jobs (id, kind, title, state, progress, message, created, links) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        self._write([(sql, (job_id, kind, title, "queued", 0.0, "waiting for a worker", created, json.dumps(links)))])

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Change some of a job's columns (`JOB_FIELDS`); result and error are dicts or None."""
        unknown = set(fields) - set(JOB_FIELDS)
        if unknown:
            raise ValueError(f"update_job: unknown field(s) {sorted(unknown)}; accepted: {', '.join(JOB_FIELDS)}")
        if not fields:
            return
        values = [_dumps(v) if k in JSON_JOB_FIELDS else v for k, v in fields.items()]
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self._write([(f"UPDATE jobs SET {assignments} WHERE id = ?", (*values, job_id))])

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        """Every column of a job, result/error/links decoded, cancel_requested a bool; None if unknown."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job(row) if row else None

    def add_job_event(self, job_id: str, event: str, data: dict[str, Any]) -> int:
        """Append an event to a job; its seq (0, 1, 2, ... per job), atomic across processes."""
        with self._lock, self._conn:
            # BEGIN IMMEDIATE takes SQLite's write lock first, so no other process reads the same next_seq.
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "UPDATE jobs SET next_seq = next_seq + 1 WHERE id = ? RETURNING next_seq - 1", (job_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no job {job_id!r}")
            seq = int(row[0])
            self._conn.execute(
                "INSERT INTO job_events (job_id, seq, event, data) VALUES (?, ?, ?, ?)",
                (job_id, seq, event, json.dumps(data)),
            )
        return seq

    def job_events(self, job_id: str, after: int = -1, limit: int = 1000) -> list[dict[str, Any]]:
        """A job's events with seq > after, in order: [{"seq", "event", "data"}]."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, event, data FROM job_events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (job_id, after, limit),
            ).fetchall()
        return [{"seq": r["seq"], "event": r["event"], "data": json.loads(r["data"])} for r in rows]

    def request_cancel(self, job_id: str) -> bool:
        """Ask a job to stop; False if it is unknown or already finished."""
        sql = "UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND finished IS NULL AND state IN (?, ?)"
        return self._write([(sql, (job_id, *UNFINISHED_JOB_STATES))]) == 1

    def count_jobs(self, states: tuple[str, ...]) -> int:
        with self._read() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM jobs WHERE state IN ({_marks(states)})", states).fetchone()
        return int(row[0])

    def jobs_in(self, states: tuple[str, ...]) -> list[dict[str, Any]]:
        """Jobs in any of these states, oldest first (the reaper looks for dead workers' jobs)."""
        with self._read() as conn:
            rows = conn.execute(f"SELECT * FROM jobs WHERE state IN ({_marks(states)}) ORDER BY created, id", states)
            rows = rows.fetchall()
        return [_job(r) for r in rows]

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
        self, sha256: str, name: str, filename: str, fmt: str, size: int, summary: dict[str, Any]
    ) -> tuple[ModelRecord, bool]:
        """Insert a model unless its content is already stored; (record, created)."""
        model_id = sha256[:16]
        before = self.get_model(model_id)
        if before is not None:
            return before, False
        inserted = self._write(
            [
                (
                    "INSERT OR IGNORE INTO models VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (model_id, sha256, name, filename, fmt, size, time.time(), json.dumps(summary)),
                )
            ]
        )
        record = self.get_model(model_id)
        assert record is not None
        return record, inserted == 1

    def get_model(self, model_id: str) -> ModelRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM models WHERE id = ?", (model_id,)).fetchone()
        return _model(row) if row else None

    def list_models(self) -> list[ModelRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM models ORDER BY created DESC, id").fetchall()
        return [_model(r) for r in rows]

    def delete_model(self, model_id: str) -> bool:
        record = self.get_model(model_id)
        if record is None:
            return False
        self._write(
            [
                ("DELETE FROM plans WHERE problem_id IN (SELECT id FROM problems WHERE model_id = ?)", (model_id,)),
                ("DELETE FROM problems WHERE model_id = ?", (model_id,)),
                ("DELETE FROM runs WHERE model_id = ?", (model_id,)),
                ("DELETE FROM models WHERE id = ?", (model_id,)),
            ]
        )
        self.blob_path(record.sha256, record.format).unlink(missing_ok=True)
        return True

    def model_file(self, record: ModelRecord) -> Path:
        return self.blob_path(record.sha256, record.format)

    # ---- problems and plans ------------------------------------------------------------

    def add_problem(
        self,
        problem: dict[str, Any],
        options: dict[str, Any],
        model_id: str | None,
        tensors: dict[str, Any] | None = None,
    ) -> str:
        """Store a planned problem with the options that made it and per-tensor facts for charts."""
        problem_id = new_id()
        self._write(
            [
                (
                    "INSERT INTO problems VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        problem_id,
                        model_id,
                        json.dumps(options),
                        json.dumps(problem),
                        json.dumps(tensors or {}),
                        time.time(),
                    ),
                )
            ]
        )
        return problem_id

    def get_problem(self, problem_id: str) -> dict[str, Any] | None:
        """{id, model_id, options, problem, tensors} or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM problems WHERE id = ?", (problem_id,)).fetchone()
        if row is None:
            return None
        return {
            "id": row["id"],
            "model_id": row["model_id"],
            "options": json.loads(row["options"]),
            "problem": json.loads(row["problem"]),
            "tensors": json.loads(row["tensors"]),
        }

    def add_plans(self, problem_id: str, plans: list[PlanRecord]) -> None:
        now = time.time()
        self._write(
            [
                (
                    "INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        p.id,
                        problem_id,
                        p.strategy,
                        p.arena_bytes,
                        p.lower_bound,
                        p.naive_bytes,
                        p.seconds,
                        int(p.valid),
                        json.dumps(p.violations),
                        json.dumps(p.plan),
                        now,
                    ),
                )
                for p in plans
            ]
        )

    def get_plan(self, plan_id: str) -> PlanRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM plans WHERE id = ?", (plan_id,)).fetchone()
        return _plan(row) if row else None

    def plans_of(self, problem_id: str) -> list[PlanRecord]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM plans WHERE problem_id = ? ORDER BY created, rowid", (problem_id,)
            ).fetchall()
        return [_plan(r) for r in rows]

    # ---- runs --------------------------------------------------------------------------

    def add_run(self, run_id: str, model_id: str, plan_id: str | None, result: dict[str, Any]) -> None:
        self._write(
            [
                (
                    "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)",
                    (run_id, model_id, plan_id, json.dumps(result), time.time()),
                )
            ]
        )

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return json.loads(row["result"]) if row else None


def _model(row: sqlite3.Row) -> ModelRecord:
    return ModelRecord(
        id=row["id"],
        sha256=row["sha256"],
        name=row["name"],
        filename=row["filename"],
        format=row["format"],
        bytes=row["bytes"],
        created=row["created"],
        summary=json.loads(row["summary"]),
    )


def _plan(row: sqlite3.Row) -> PlanRecord:
    return PlanRecord(
        id=row["id"],
        problem_id=row["problem_id"],
        strategy=row["strategy"],
        arena_bytes=row["arena_bytes"],
        lower_bound=row["lower_bound"],
        naive_bytes=row["naive_bytes"],
        seconds=row["seconds"],
        valid=bool(row["valid"]),
        violations=json.loads(row["violations"]),
        plan=json.loads(row["plan"]),
    )


def _marks(values: tuple[Any, ...]) -> str:
    return ", ".join("?" * len(values)) or "NULL"  # IN (NULL) matches nothing


def _dumps(value: dict[str, Any] | None) -> str | None:
    return json.dumps(value) if value is not None else None


def _job(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    out.pop("next_seq", None)
    for key in ("result", "error"):
        out[key] = json.loads(row[key]) if row[key] else None
    out["links"] = json.loads(row["links"]) if row["links"] else {}
    out["cancel_requested"] = bool(row["cancel_requested"])
    return out
