"""create usage rollup tables

The Spark usage job (``queuecore-spark usage``) reads the usage-metering topic ``__usage`` and adds its
events up per project environment, API key, category and minute / hour / day into ``usage_rollups``: requests,
messages, bytes in and out, and 429s, which the dashboard's usage charts read. ``usage_rollup_progress`` holds
the next offset of ``__usage`` to roll up, moved in the same transaction as the counts it covers, so a run
that crashed or is run twice adds nothing twice.

Revision ID: 3f8e6a1c9b27
Revises: 9c3e51a7d2f0
Create Date: 2026-11-24 17:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3f8e6a1c9b27"
down_revision: str | None = "9c3e51a7d2f0"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_rollups",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("environment", sa.String(length=20), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("granularity", sa.String(length=10), nullable=False),
        sa.Column("bucket_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("bytes_in", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("bytes_out", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("rate_limited", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint(
            "project_id",
            "environment",
            "granularity",
            "bucket_start",
            "key_id",
            "category",
            name="pk_usage_rollups",
        ),
        sa.CheckConstraint("granularity IN ('minute', 'hour', 'day')", name="ck_usage_rollups_granularity"),
    )
    op.create_table(
        "usage_rollup_progress",
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("source", name="pk_usage_rollup_progress"),
    )


def downgrade() -> None:
    op.drop_table("usage_rollup_progress")
    op.drop_table("usage_rollups")
