"""create push endpoints and push attempts

A push group (group config ``push``) has one ``push_endpoints`` row: its URL, delivery options, signing
secrets (sealed; the previous one signs too until ``previous_until_ms`` after a rotation) and the breaker
state its workers last wrote. ``push_attempts`` keeps the newest POSTs per group for the attempts API.

Revision ID: 9dfce8498b76
Revises: 395752facbb5
Create Date: 2026-11-26 19:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9dfce8498b76"
down_revision: str | None = "395752facbb5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "push_endpoints",
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("max_concurrency", sa.Integer(), nullable=False),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("timeout", sa.String(length=16), nullable=False),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=False),
        sa.Column("ordered", sa.Boolean(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("secret", sa.String(length=255), nullable=False),
        sa.Column("previous_secret", sa.String(length=255), nullable=True),
        sa.Column("previous_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("breaker_failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("breaker_open_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["consumer_groups.id"],
            name="fk_push_endpoints_group_id_consumer_groups",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", name="pk_push_endpoints"),
    )
    op.create_table(
        "push_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=32), nullable=False),
        sa.Column("message_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["consumer_groups.id"],
            name="fk_push_attempts_group_id_consumer_groups",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_push_attempts"),
    )
    op.create_index("ix_push_attempts_group", "push_attempts", ["group_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_push_attempts_group", table_name="push_attempts")
    op.drop_table("push_attempts")
    op.drop_table("push_endpoints")
