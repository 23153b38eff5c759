"""pause, DLQ breaker and failed-attempt history

A group can be paused (``paused_reason`` set: ``user`` or ``dlq-breaker``; ``paused_until_ms`` when it
resumes by itself, None for a pause without end). The DLQ breaker counts the group's delivery outcomes
in one window at a time, across API nodes, in ``breaker_window_ms`` (the window's start),
``breaker_acked`` and ``breaker_failed``. A lease row keeps the failed attempts of its message before the
last one (``failures``: a JSON list of ``[at_ms, reason]``), copied into the dead letter when it moves.

Revision ID: efdc7ba9cb3c
Revises: 9dfce8498b76
Create Date: 2026-11-26 19:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "efdc7ba9cb3c"
down_revision: str | None = "9dfce8498b76"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("consumer_groups") as batch:
        batch.add_column(sa.Column("paused_reason", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("paused_until_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("breaker_window_ms", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("breaker_acked", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("breaker_failed", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("group_leases") as batch:
        batch.add_column(sa.Column("failures", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("group_leases") as batch:
        batch.drop_column("failures")
    with op.batch_alter_table("consumer_groups") as batch:
        batch.drop_column("breaker_failed")
        batch.drop_column("breaker_acked")
        batch.drop_column("breaker_window_ms")
        batch.drop_column("paused_until_ms")
        batch.drop_column("paused_reason")
