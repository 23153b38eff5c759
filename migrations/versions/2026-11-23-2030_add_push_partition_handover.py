"""add push partition hand-over

A push member keeps its first-delivery leases in memory and checkpoints them; a partition it holds
changes hands cooperatively (``held_by``), and every change of owner or offsets bumps ``epoch``, which
fences the checkpoints of a member that has not noticed yet.

Revision ID: 5b1d7e20c4a9
Revises: 86af2b58e1c3
Create Date: 2026-11-23 20:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5b1d7e20c4a9"
down_revision: str | None = "86af2b58e1c3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("group_members") as batch:
        batch.add_column(sa.Column("push", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("group_partitions") as batch:
        batch.add_column(sa.Column("held_by", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("epoch", sa.BigInteger(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("group_partitions") as batch:
        batch.drop_column("epoch")
        batch.drop_column("held_by")
    with op.batch_alter_table("group_members") as batch:
        batch.drop_column("push")
