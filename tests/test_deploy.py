"""The team deployment file names the settings the service reads and commands the CLI has."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from typer.testing import CliRunner

from app.cli import app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_compose_runs_postgres_a_scheduler_two_workers_and_the_app_on_one_volume():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "scheduler", "app"} <= set(services)
    workers = [s for name, s in services.items() if name.startswith("worker")]
    assert len(workers) >= 2
    for service in [services["app"], *workers]:
        env = service["environment"]
        assert env["MEMPLAN_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["MEMPLAN_SCHEDULER"] == "tcp://scheduler:8786" and env["MEMPLAN_DATA"] == "/data"
        assert "memplan-data:/data" in service["volumes"]
        # Every command is a memplan command that exists, with the options it takes.
        command = service["command"]
        assert command[0] == "memplan"
        help_text = CliRunner().invoke(app, [command[1], "--help"])
        assert help_text.exit_code == 0, shlex.join(command)
    # The three variables are the ones Settings reads.
    settings = Settings(
        _env_file=None,
        **{
            "MEMPLAN_DATA": "/data",
            "MEMPLAN_DATABASE_URL": "postgresql+psycopg://x@y/z",
            "MEMPLAN_SCHEDULER": "tcp://s:1",
        },
    )
    assert str(settings.data_dir) == "/data" and settings.database_url.startswith("postgresql")
    assert settings.scheduler == "tcp://s:1"


def test_the_image_warms_numba_as_the_user_it_runs_as():
    """The build's warm-up (run for real in tests/cli/test_warm.py) runs as the service's user, with
    numba's cache in that user's home: the image's processes can read it and add to it."""
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    warm = lines.index("RUN memplan warm")
    assert "USER memplan" in lines[:warm] and lines[-1].startswith('CMD ["memplan"')
    cache = [line.split("=", 1)[1] for line in lines[:warm] if line.startswith("ENV NUMBA_CACHE_DIR=")]
    assert len(cache) == 1 and cache[0].startswith("/home/memplan/")
    assert CliRunner().invoke(app, ["warm", "--help"]).exit_code == 0
