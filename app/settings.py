"""Service settings, read from the environment (prefix ``MEMPLAN_``) or given directly.

The limits below bound what one untrusted request can make the service do: how big a
tensor or an arena may be, how long a plan may search, how many jobs run or wait, and
how far a .zip may expand. `create_app` makes them the process's active `Limits`, which
the runtime-facing modules read (one service per process).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

GIB = 1024**3


class Settings(BaseSettings):
    """Everything the service needs to start; `memplan serve` builds one from its flags."""

    model_config = SettingsConfigDict(env_prefix="MEMPLAN_", populate_by_name=True)

    # Where models (content-addressed) and the SQLite file live; env MEMPLAN_DATA.
    data_dir: Path = Field(default=Path("memplan-data"), validation_alias=AliasChoices("MEMPLAN_DATA", "data_dir"))
    # Where the metadata lives: unset means SQLite at <data_dir>/memplan.sqlite3; a team sets a shared
    # database, e.g. postgresql+psycopg://memplan:secret@db:5432/memplan. Env MEMPLAN_DATABASE_URL.
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("MEMPLAN_DATABASE_URL", "database_url")
    )
    max_upload_bytes: int = Field(default=2 * GIB, gt=0)
    # A Problem JSON or CSV body (POST /api/v1/problems/plan): 256 MiB holds a Problem JSON of
    # 10^6 buffers (about 90 MB) with room to spare; env MEMPLAN_MAX_PROBLEM_BYTES.
    max_problem_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    host: str = "127.0.0.1"
    port: int = 8000
    # The Dask scheduler that runs jobs (tcp://host:port); env MEMPLAN_SCHEDULER. `memplan serve`
    # without it starts a local cluster; `create_app` needs one.
    scheduler: str | None = Field(default=None, validation_alias=AliasChoices("MEMPLAN_SCHEDULER", "scheduler"))
    # Jobs allowed to wait for a worker; one more is refused with 429 until the line moves.
    max_queued_jobs: int = Field(default=32, ge=0)
    # Plan tasks one sweep may queue (model x strategy x dims); a larger sweep is refused with 429.
    max_sweep_tasks: int = Field(default=20_000, ge=1)

    # ---- limits on what a model may make the service allocate or compute --------------
    # Elements of any one tensor (inputs, activations, folded constants), counted as float32:
    # a tensor may take 4 bytes per allowed element; 2^28 elements = 1 GiB.
    max_tensor_elements: int = Field(default=1 << 28, ge=1)
    # Arena a run may allocate; a plan above it is refused before allocating.
    max_arena_bytes: int = Field(default=4 * GIB, ge=1)
    # Seconds a search strategy (the exact solver, hill climbing) may take in one planning job.
    plan_seconds: float = Field(default=60.0, gt=0)
    # A .zip upload: members, bytes once unpacked, and unpacked/compressed ratio of any member.
    zip_max_entries: int = Field(default=1000, ge=1)
    zip_max_bytes: int = Field(default=8 * GIB, ge=1)
    zip_max_ratio: float = Field(default=200.0, ge=1)

    # ---- access -------------------------------------------------------------------------
    # When set, every write (POST, PUT, PATCH, DELETE) needs this token; env MEMPLAN_TOKEN.
    token: str | None = Field(default=None, validation_alias=AliasChoices("MEMPLAN_TOKEN", "token"))
    # Review links: every write is refused, pages and reads work; env MEMPLAN_READ_ONLY.
    read_only: bool = Field(default=False, validation_alias=AliasChoices("MEMPLAN_READ_ONLY", "read_only"))

    def limits(self) -> Limits:
        return Limits(
            max_tensor_elements=self.max_tensor_elements,
            max_arena_bytes=self.max_arena_bytes,
            plan_seconds=self.plan_seconds,
            zip_max_entries=self.zip_max_entries,
            zip_max_bytes=self.zip_max_bytes,
            zip_max_ratio=self.zip_max_ratio,
        )


@dataclass(frozen=True)
class Limits:
    """The limits the runtime-facing modules apply; defaults equal `Settings`' defaults."""

    max_tensor_elements: int = 1 << 28
    max_arena_bytes: int = 4 * GIB
    plan_seconds: float = 60.0
    zip_max_entries: int = 1000
    zip_max_bytes: int = 8 * GIB
    zip_max_ratio: float = 200.0

    @property
    def max_tensor_bytes(self) -> int:
        """The runtime's byte limit per tensor: `max_tensor_elements` float32 elements."""
        return self.max_tensor_elements * 4

    def cap_time(self, options: dict[str, Any]) -> dict[str, Any]:
        """Strategy options with `time_limit` no longer than `plan_seconds` (left out: the strategy's default)."""
        given = options.get("time_limit")
        if given is None or given <= self.plan_seconds:
            return options
        return {**options, "time_limit": self.plan_seconds}


_active = Limits()


def active_limits() -> Limits:
    """The limits of the service running in this process (defaults when none was created)."""
    return _active


def activate(limits: Limits) -> None:
    global _active
    _active = limits
