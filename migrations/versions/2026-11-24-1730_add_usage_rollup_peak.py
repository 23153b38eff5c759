"""add usage rollup peak

The dashboard's usage charts show the busiest second of each bucket beside its totals: the usage job now
also keeps, per bucket, the most requests seen in one second (``peak_requests_per_second``; kept as the
larger of the runs' values when a bucket is added to by more than one run).

Revision ID: 7a2c4e9d1b53
Revises: 3f8e6a1c9b27
Create Date: 2026-11-24 17:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7a2c4e9d1b53"
down_revision: str | None = "3f8e6a1c9b27"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_rollups") as batch:
        batch.add_column(
            sa.Column("peak_requests_per_second", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("usage_rollups") as batch:
        batch.drop_column("peak_requests_per_second")
