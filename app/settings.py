"""Service settings, read from the environment (prefix ``MEMPLAN_``) or given directly."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

GIB = 1024**3


class Settings(BaseSettings):
    """Everything the service needs to start; `memplan serve` builds one from its flags."""

    model_config = SettingsConfigDict(env_prefix="MEMPLAN_", populate_by_name=True)

    # Where models (content-addressed) and the SQLite file live; env MEMPLAN_DATA.
    data_dir: Path = Field(default=Path("memplan-data"), validation_alias=AliasChoices("MEMPLAN_DATA", "data_dir"))
    max_upload_bytes: int = Field(default=2 * GIB, gt=0)
    host: str = "127.0.0.1"
    port: int = 8000
    # Jobs (slow strategies, runs) executing at once; the rest wait in line.
    max_jobs: int = Field(default=2, ge=1)
    # Finished jobs kept in memory for their pages and events.
    keep_jobs: int = Field(default=200, ge=1)
