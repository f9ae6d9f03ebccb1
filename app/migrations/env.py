"""Alembic's environment: runs the revisions on the connection `app.migrations.config` carries."""

from __future__ import annotations

from alembic import context

from app.db import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("memplan's migrations run through app.migrations.upgrade(connection), not the alembic command")
# render_as_batch: SQLite alters a table by copying it, which Alembic's batch mode does.
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
