"""The database's tables as SQLAlchemy 2 typed models, and the engine memplan opens on a URL.

The stores read and write these models through `Storage`'s sessions (`app.storage` for models,
problems, plans, runs and jobs; `app.notes` for notes) and turn rows into their record types.
The tables themselves are created and changed by the Alembic revisions in
`app/migrations/versions/`, never by `Base.metadata.create_all`; a test checks that the
revisions and these models agree, on SQLite and on PostgreSQL.

JSON documents (problems, plans, summaries, job results) are stored as text in both databases
(`JSONText`), so that a SQLite file made before SQLAlchemy reads the same.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
    false,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Write transactions on SQLite start with BEGIN IMMEDIATE when a connection carries this option.
IMMEDIATE = "memplan_begin_immediate"


class JSONText(TypeDecorator[Any]):
    """A JSON document kept as text: dicts and lists in Python, TEXT in the database."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else json.dumps(value)

    def process_result_value(self, value: str | None, dialect: Any) -> Any:
        return None if value is None else json.loads(value)


class Base(DeclarativeBase):
    pass


class ModelRow(Base):
    __tablename__ = "models"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    sha256: Mapped[str] = mapped_column(String, unique=True)
    name: Mapped[str] = mapped_column(String)
    filename: Mapped[str] = mapped_column(String)
    format: Mapped[str] = mapped_column(String)  # "onnx" or "zip"
    bytes: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[float] = mapped_column(Float)
    summary: Mapped[dict[str, Any]] = mapped_column(JSONText)


class ProblemRow(Base):
    __tablename__ = "problems"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    model_id: Mapped[str | None] = mapped_column(String, ForeignKey("models.id", ondelete="CASCADE"))
    options: Mapped[dict[str, Any]] = mapped_column(JSONText)
    problem: Mapped[dict[str, Any]] = mapped_column(JSONText)
    tensors: Mapped[dict[str, Any]] = mapped_column(JSONText)
    created: Mapped[float] = mapped_column(Float)


class PlanRow(Base):
    __tablename__ = "plans"
    __table_args__ = (Index("plans_by_problem", "problem_id"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    problem_id: Mapped[str] = mapped_column(String, ForeignKey("problems.id", ondelete="CASCADE"))
    strategy: Mapped[str] = mapped_column(String)
    arena_bytes: Mapped[int] = mapped_column(BigInteger)
    lower_bound: Mapped[int] = mapped_column(BigInteger)
    naive_bytes: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)
    valid: Mapped[bool] = mapped_column(Boolean)
    violations: Mapped[list[str]] = mapped_column(JSONText)
    plan: Mapped[dict[str, Any]] = mapped_column(JSONText)  # the planner's Plan JSON
    created: Mapped[float] = mapped_column(Float)
    # Order within one add_plans call: plans are listed as they were given.
    position: Mapped[int] = mapped_column(Integer, server_default="0")


class NoteRow(Base):
    """A reviewer's note on a plan, or on one of its tensors at a step (tensor and step both set)."""

    __tablename__ = "notes"
    __table_args__ = (Index("notes_by_plan", "plan_id", "created"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    plan_id: Mapped[str] = mapped_column(String, ForeignKey("plans.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(Text)
    tensor: Mapped[str | None] = mapped_column(String)
    step: Mapped[int | None] = mapped_column(Integer)
    author: Mapped[str | None] = mapped_column(String)
    created: Mapped[float] = mapped_column(Float)


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    model_id: Mapped[str | None] = mapped_column(String, ForeignKey("models.id", ondelete="CASCADE"))
    plan_id: Mapped[str | None] = mapped_column(String)
    result: Mapped[dict[str, Any]] = mapped_column(JSONText)
    created: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("jobs_by_state", "state"),)

    id: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String)
    title: Mapped[str] = mapped_column(String)
    state: Mapped[str] = mapped_column(String)
    progress: Mapped[float] = mapped_column(Float)
    message: Mapped[str] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONText)
    created: Mapped[float] = mapped_column(Float)
    finished: Mapped[float | None] = mapped_column(Float)
    links: Mapped[dict[str, str]] = mapped_column(JSONText, server_default="{}")
    heartbeat: Mapped[float | None] = mapped_column(Float)
    worker: Mapped[str | None] = mapped_column(String)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # The seq the next event gets; bumped in the same transaction that inserts the event.
    next_seq: Mapped[int] = mapped_column(Integer, server_default="0")


class JobEventRow(Base):
    __tablename__ = "job_events"

    job_id: Mapped[str] = mapped_column(String, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    event: Mapped[str] = mapped_column(String)
    data: Mapped[dict[str, Any]] = mapped_column(JSONText)


def public_url(url: str | URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


def open_engine(url: str | URL) -> Engine:
    """An engine for memplan's database: SQLite in WAL mode with foreign keys, or PostgreSQL."""
    url = make_url(url)
    # As many connections as the server's thread pool runs requests (40): a request never queues
    # for a connection behind others that are only reading.
    pool = {"pool_size": 10, "max_overflow": 30, "pool_timeout": 10}
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **pool)
        event.listen(engine, "connect", _sqlite_connected)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    connect_args = {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}
    # pre_ping: a connection the server closed (a restart, a failover) is replaced, not handed out.
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args, **pool)


def _sqlite_connected(dbapi_connection: Any, _record: Any) -> None:
    # SQLAlchemy emits BEGIN itself (below), so that DDL is transactional and writers can ask for IMMEDIATE.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    # IMMEDIATE takes the write lock at BEGIN: two writers never both read, then collide on upgrading.
    immediate = connection.get_execution_options().get(IMMEDIATE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
