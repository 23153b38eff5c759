"""add topic replicas

A topic says how many copies of each message the log engine keeps (``replicas``: 1, 3 or 5, fixed at
creation). Topics created before were all kept by the local engine, in one copy: they get 1.

Revision ID: 1744497a0c7a
Revises: 7a2c4e9d1b53
Create Date: 2026-11-24 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "1744497a0c7a"
down_revision: str | None = "7a2c4e9d1b53"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("topics") as batch:
        batch.add_column(sa.Column("replicas", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("topics") as batch:
        batch.drop_column("replicas")
