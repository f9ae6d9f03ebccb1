"""memplan's schema migrations: Alembic, configured here in code (there is no alembic.ini).

`upgrade(connection)` brings a database to the newest revision; `app.storage` calls it every
time storage opens, inside one transaction that also serialises concurrent openers. The
revisions live in `versions/`, one file each, shipped inside the package so that an installed
memplan finds them. A new revision, written from the difference between `app.db`'s models and
a database at the current head: `python -m app.migrations "what changed"`.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

HERE = Path(__file__).resolve().parent
FIRST = "0001"  # the schema memplan had before migrations: a SQLite file made then is stamped with it


def config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, pointing at this folder; env.py runs on `connection` when given."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest revision."""
    found = ScriptDirectory.from_config(config()).get_current_head()
    assert found is not None
    return found


def current(connection: Connection) -> str | None:
    """The revision a database is at; None when it was never migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database up to `revision`, adopting a file made before migrations existed."""
    if current(connection) is None and inspect(connection).has_table("models"):
        command.stamp(config(connection), _adopted(connection))
    command.upgrade(config(connection), revision)


def _adopted(connection: Connection) -> str:
    """The revision an unversioned database already matches (memplan's tables without alembic_version)."""
    columns = {c["name"] for c in inspect(connection).get_columns("jobs")}
    # The job engine's columns were added without a revision for a while (they are revision 0002).
    return "0002" if "next_seq" in columns and inspect(connection).has_table("job_events") else FIRST
