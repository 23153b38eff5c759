"""alert endpoints per environment

An alert endpoint was per project, so a development key could read, repoint and delete production's
endpoint and see its delivery attempts. Now each environment has its own: the endpoint's key is
``(project_id, environment)``, and events and attempts carry the environment they belong to.

Existing rows: a project's endpoint was set by a key of some environment, which was not recorded, and it
received the alerts of every environment. So that no environment loses its alerts, it is copied to all
three (the same URL, secret and breaker); each can then be changed on its own. Events and attempts
already written are taken as production's.

Revision ID: 9c3e51a7d2f0
Revises: 5b1d7e20c4a9
Create Date: 2026-11-24 16:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9c3e51a7d2f0"
down_revision: str | None = "5b1d7e20c4a9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ENDPOINT_COLUMNS = "project_id, url, secret, failures, open_until_ms, created_at, updated_at"


def upgrade() -> None:
    with op.batch_alter_table("alert_endpoints", recreate="always") as batch:
        batch.add_column(
            sa.Column("environment", sa.String(length=20), nullable=False, server_default="production")
        )
        batch.drop_constraint("pk_alert_endpoints", type_="primary")
        batch.create_primary_key("pk_alert_endpoints", ["project_id", "environment"])
    for environment in ("development", "staging"):
        op.execute(
            f"INSERT INTO alert_endpoints (environment, {_ENDPOINT_COLUMNS}) "
            f"SELECT '{environment}', {_ENDPOINT_COLUMNS} FROM alert_endpoints WHERE environment = 'production'"
        )
    with op.batch_alter_table("alert_endpoints") as batch:
        batch.alter_column("environment", server_default=None)

    with op.batch_alter_table("alert_events") as batch:
        batch.add_column(
            sa.Column("environment", sa.String(length=20), nullable=False, server_default="production")
        )
    with op.batch_alter_table("alert_events") as batch:
        batch.alter_column("environment", server_default=None)

    with op.batch_alter_table("alert_attempts") as batch:
        batch.add_column(
            sa.Column("environment", sa.String(length=20), nullable=False, server_default="production")
        )
        batch.drop_index("ix_alert_attempts_project")
        batch.create_index("ix_alert_attempts_environment", ["project_id", "environment", "id"])
    with op.batch_alter_table("alert_attempts") as batch:
        batch.alter_column("environment", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("alert_attempts") as batch:
        batch.drop_index("ix_alert_attempts_environment")
        batch.create_index("ix_alert_attempts_project", ["project_id", "id"])
        batch.drop_column("environment")
    with op.batch_alter_table("alert_events") as batch:
        batch.drop_column("environment")
    # Back to one endpoint per project: production's, or else any one of the project's.
    op.execute(
        "DELETE FROM alert_endpoints WHERE environment <> 'production' AND project_id IN "
        "(SELECT project_id FROM alert_endpoints WHERE environment = 'production')"
    )
    op.execute(
        "DELETE FROM alert_endpoints WHERE environment = 'staging' AND project_id IN "
        "(SELECT project_id FROM alert_endpoints WHERE environment = 'development')"
    )
    with op.batch_alter_table("alert_endpoints", recreate="always") as batch:
        batch.drop_constraint("pk_alert_endpoints", type_="primary")
        batch.create_primary_key("pk_alert_endpoints", ["project_id"])
        batch.drop_column("environment")
