"""Plans keep the order they were given in (SQLite's rowid did that before; PostgreSQL has none).

Revision ID: 0003
Revises: 0002
Create Date: 2026-05-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("position", sa.Integer(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "sqlite":
        op.execute("UPDATE plans SET position = rowid")  # the order plans made before were listed in


def downgrade() -> None:
    op.drop_column("plans", "position")
