"""What the Dask job engine keeps per job (links, heartbeat, worker, attempts, a cancel request,
the next event's seq) and the events themselves.

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("links", sa.Text(), nullable=False, server_default="{}"))
    op.add_column("jobs", sa.Column("heartbeat", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("worker", sa.String(), nullable=True))
    op.add_column("jobs", sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("jobs", sa.Column("next_seq", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("jobs_by_state", "jobs", ["state"])
    op.create_table(
        "job_events",
        sa.Column("job_id", sa.String(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("event", sa.String(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_events")
    op.drop_index("jobs_by_state", table_name="jobs")
    for column in ("next_seq", "cancel_requested", "attempts", "worker", "heartbeat", "links"):
        op.drop_column("jobs", column)
