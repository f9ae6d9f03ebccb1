"""`python -m app.migrations "what changed"`: write the next revision from the difference between
`app.db`'s models and a scratch SQLite database brought to the current head."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from alembic import command

from app.db import open_engine
from app.migrations import config, head, upgrade


def main(message: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        engine = open_engine(f"sqlite:///{Path(scratch) / 'head.sqlite3'}")
        with engine.begin() as connection:
            upgrade(connection)
            rev_id = f"{int(head()) + 1:04d}"
            command.revision(config(connection), message, autogenerate=True, rev_id=rev_id)
        engine.dispose()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit('usage: python -m app.migrations "what changed"')
    main(sys.argv[1])
