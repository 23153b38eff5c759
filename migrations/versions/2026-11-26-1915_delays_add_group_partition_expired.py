"""delays: add group_partitions.expired and a due-time index on group_leases

A group's partition counts the messages that expired (their TTL passed) before it delivered them; group
describe answers their sum as ``expired``. Existing partitions start at 0. Delayed messages wait as lease
rows due at their ``deliverAt`` (possibly many, for days): the due-lease scan reads them by due time.

Revision ID: 7ebac95d791a
Revises: efdc7ba9cb3c
Create Date: 2026-11-26 19:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7ebac95d791a"
down_revision: str | None = "efdc7ba9cb3c"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("group_partitions") as batch:
        batch.add_column(sa.Column("expired", sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("group_leases") as batch:
        batch.create_index("ix_group_leases_due", ["group_id", "deadline_ms"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("group_leases") as batch:
        batch.drop_index("ix_group_leases_due")
    with op.batch_alter_table("group_partitions") as batch:
        batch.drop_column("expired")
