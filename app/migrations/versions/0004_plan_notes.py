"""Reviewers' notes on plans: a note on the whole plan, or on one of its tensors at a step.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notes",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("plan_id", sa.String(), sa.ForeignKey("plans.id", ondelete="CASCADE"), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tensor", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("author", sa.String(), nullable=True),
        sa.Column("created", sa.Float(), nullable=False),
    )
    op.create_index("notes_by_plan", "notes", ["plan_id", "created"])


def downgrade() -> None:
    op.drop_index("notes_by_plan", table_name="notes")
    op.drop_table("notes")
