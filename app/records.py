"""What storage returns: one frozen record per stored thing (models, problems, plans, runs,
jobs), so that callers read named fields instead of dict keys. `app.storage` makes them from
rows of `app.db`'s tables; nothing else writes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
class JobRecord:
    """A job's row: every column but the event counter."""

    id: str
    kind: str
    title: str
    state: str
    progress: float
    message: str
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    links: dict[str, str]
    created: float
    finished: float | None = None
    heartbeat: float | None = None
    worker: str | None = None
    attempts: int = 0
    cancel_requested: bool = False


@dataclass(frozen=True)
class ProblemRecord:
    id: str
    model_id: str | None  # None: a bare problem, or a pipeline's
    options: dict[str, Any]  # the request that made it
    problem: dict[str, Any] | None  # the planner's Problem JSON (None: read without its content)
    tensors: dict[str, Any] | None  # per-tensor facts for charts (None: read without its content)
    created: float


@dataclass(frozen=True)
class RunRecord:
    id: str
    model_id: str | None  # None: a pipeline's run
    plan_id: str | None
    result: dict[str, Any]
    created: float


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
