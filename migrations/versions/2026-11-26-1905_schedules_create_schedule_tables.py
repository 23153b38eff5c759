"""create schedule tables

Schedules (``/v1/schedules``): a row per schedule with the due time it publishes next
(``next_run_ms``, claimed with fencing by the runner of any API node) and its last runs.

Revision ID: 3afccb116e5a
Revises: 3c81f0d2a9e4
Create Date: 2026-11-26 19:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3afccb116e5a"
down_revision: str | None = "3c81f0d2a9e4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("environment", sa.String(length=20), nullable=False),
        sa.Column("topic_id", sa.String(length=32), nullable=False),
        sa.Column("cron", sa.String(length=255), nullable=True),
        sa.Column("every", sa.String(length=16), nullable=True),
        sa.Column("every_ms", sa.BigInteger(), nullable=True),
        sa.Column("anchor_ms", sa.BigInteger(), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=4096), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("next_run_ms", sa.BigInteger(), nullable=False),
        sa.Column("claimed_until_ms", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_schedules_project_id_projects", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["topic_id"], ["topics.id"], name="fk_schedules_topic_id_topics", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_schedules"),
    )
    op.create_index("ix_schedules_scope", "schedules", ["project_id", "environment", "id"])
    op.create_index("ix_schedules_due", "schedules", ["status", "next_run_ms"])
    op.create_index("ix_schedules_topic_id", "schedules", ["topic_id"])
    op.create_table(
        "schedule_runs",
        sa.Column("schedule_id", sa.String(length=32), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name="fk_schedule_runs_schedule_id_schedules",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("schedule_id", "at_ms", name="pk_schedule_runs"),
    )


def downgrade() -> None:
    op.drop_table("schedule_runs")
    op.drop_index("ix_schedules_topic_id", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_index("ix_schedules_scope", table_name="schedules")
    op.drop_table("schedules")
