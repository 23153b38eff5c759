"""flow: group flow control and filter

Consumer groups gain ``max_in_flight`` (unacked messages across all members), ``rate`` (messages per
second delivered to the group) and ``filter`` (the group's filter as written; compiled by the broker).
Members gain ``in_flight_claim``: how many of the group's ``max_in_flight`` the member may hold (its held
messages plus the room it reserved); the claims of a group's live members never add up to more than its
``max_in_flight`` (``app/broker/delivery/flow.py``).

Revision ID: 395752facbb5
Revises: 3afccb116e5a
Create Date: 2026-11-26 19:01:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "395752facbb5"
down_revision: str | None = "3afccb116e5a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("consumer_groups") as batch:
        batch.add_column(sa.Column("max_in_flight", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("rate", sa.Float(), nullable=True))
        batch.add_column(sa.Column("filter", sa.String(length=1024), nullable=True))
    with op.batch_alter_table("group_members") as batch:
        batch.add_column(sa.Column("in_flight_claim", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("group_members") as batch:
        batch.drop_column("in_flight_claim")
    with op.batch_alter_table("consumer_groups") as batch:
        batch.drop_column("filter")
        batch.drop_column("rate")
        batch.drop_column("max_in_flight")
