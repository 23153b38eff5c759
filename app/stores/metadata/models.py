"""Metadata tables (SQLAlchemy 2). Postgres in production, SQLite when embedded; Alembic owns the schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class User(Base):
    """An account user of the dashboard."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Set by an operator (``users disable``): no sign-in, no session.
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class UserSession(Base):
    """A dashboard session: the cookie holds a random token, this row its SHA-256 and the CSRF token."""

    __tablename__ = "user_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # hex SHA-256 of the cookie's token
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Project(Base):
    """A customer project: three environments, a tier, optional custom limits."""

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    tier: Mapped[str] = mapped_column(String(20))
    # {"publish": n, "consume": n, "admin": n}; only for the enterprise tier.
    custom_limits: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ApiKey(Base):
    """An API key bound to one project and environment; only its keyed hash is stored."""

    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_project_environment", "project_id", "environment"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment: Mapped[str] = mapped_column(String(20))
    # hex HMAC-SHA256(server secret, key); the lookup column.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(20))
    last_four: Mapped[str] = mapped_column(String(4))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Topic(Base):
    """A topic in one project environment; its messages live in the log engine under ``id``."""

    __tablename__ = "topics"
    __table_args__ = (UniqueConstraint("project_id", "environment", "name", name="uq_topics_scope_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment: Mapped[str] = mapped_column(String(20))
    name: Mapped[str] = mapped_column(String(249))
    partitions: Mapped[int] = mapped_column(Integer)
    retention: Mapped[str] = mapped_column(String(16))
    retention_ms: Mapped[int] = mapped_column(BigInteger)
    delivery: Mapped[str] = mapped_column(String(20))
    # How many copies of each message the log engine keeps; fixed at creation.
    replicas: Mapped[int] = mapped_column(Integer, server_default="1")
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ConsumerGroup(Base):
    """A consumer group of one topic: its config and its generation (bumped at every rebalance)."""

    __tablename__ = "consumer_groups"
    __table_args__ = (UniqueConstraint("topic_id", "name", name="uq_consumer_groups_topic_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    topic_id: Mapped[str] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(249))
    generation: Mapped[int] = mapped_column(Integer)
    # How many topic partitions the assignment covers; behind the topic's count means: rebalance.
    partition_count: Mapped[int] = mapped_column(Integer)
    # Durations are kept as the customer wrote them ("30s") and in milliseconds.
    ack_timeout: Mapped[str] = mapped_column(String(16))
    ack_timeout_ms: Mapped[int] = mapped_column(BigInteger)
    session_timeout: Mapped[str] = mapped_column(String(16))
    session_timeout_ms: Mapped[int] = mapped_column(BigInteger)
    # {"maxRetries", "retryDelay", "alertThreshold"}, or None: no DLQ.
    dead_letter: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Whether the DLQ depth alert may fire: cleared when it fires, set again once the depth falls below
    # the threshold (one alert per crossing).
    dlq_alert_armed: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class GroupMember(Base):
    """A live member of a group (``csr_…``); gone once ``expires_at_ms`` passes without a heartbeat."""

    __tablename__ = "group_members"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("consumer_groups.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_timeout: Mapped[str] = mapped_column(String(16))
    session_timeout_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)
    joined_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # A push member (a WebSocket): it keeps first-delivery leases in memory, so a partition it owns
    # changes hands only once it has released it (``GroupPartition.held_by``).
    push: Mapped[bool] = mapped_column(Boolean, server_default=false(), default=False)


class GroupPartition(Base):
    """One partition of a group: its owner, committed offset and delivery position.

    ``committed`` (``current`` on the wire): every offset below it is acked. ``position``: the next
    offset to read from the log; offsets in ``[committed, position)`` not yet acked have a lease row.
    Both are None until the group first starts on the partition (``startFrom`` then applies). Offsets
    at or past ``position`` that have a lease row (a push member's checkpoint: acked out of order, or
    waiting for a retry) are skipped by reads from ``position``.

    ``held_by``: a push member that owned the partition and must still release it (write its in-memory
    leases and position) before ``member_id`` may deliver from it. ``epoch`` is bumped at every change
    of owner and every seek or reset; a push member's checkpoints name the epoch they were made in.
    """

    __tablename__ = "group_partitions"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("consumer_groups.id", ondelete="CASCADE"), primary_key=True
    )
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    member_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    committed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    position: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    held_by: Mapped[str | None] = mapped_column(String(32), nullable=True, default=None)
    epoch: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    # Messages whose TTL passed before this group delivered them (group describe: ``expired``).
    expired: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)


class GroupLease(Base):
    """A delivered, not yet committed message of a group: who holds it, which attempt, until when.

    An unacked lease whose ``deadline_ms`` has passed (ack timeout, or a nack's delay) is redelivered to
    the partition's owner. Acked leases stay until ``committed`` moves past them.
    """

    __tablename__ = "group_leases"
    __table_args__ = (
        Index("ix_group_leases_member", "group_id", "member_id"),
        # The due-time index: delayed messages wait here (possibly many, for days) beside retries.
        Index("ix_group_leases_due", "group_id", "deadline_ms"),
    )

    group_id: Mapped[str] = mapped_column(
        ForeignKey("consumer_groups.id", ondelete="CASCADE"), primary_key=True
    )
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    member_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer)
    deadline_ms: Mapped[int] = mapped_column(BigInteger)
    acked: Mapped[bool] = mapped_column(Boolean)
    # Why the last attempt failed (a nack's reason, "ack timeout"), kept for the dead letter.
    reason: Mapped[str | None] = mapped_column(String(1024), nullable=True, default=None)
    # A replayed dead letter: its copy's offset in the group's DLQ log, read when the topic's own log
    # no longer holds the message (retention).
    replay_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)


class DeadLetter(Base):
    """A message in a group's DLQ. Its copy (data, key, headers, and the failure in the record's
    metadata) is record ``dlq_offset`` of the group's DLQ log; this row is what makes it a member of the
    DLQ: moving a message in (with its lease acked) or out (replay, delete) is one metadata transaction."""

    __tablename__ = "dead_letters"
    __table_args__ = (Index("ix_dead_letters_order", "group_id", "dlq_offset"),)

    group_id: Mapped[str] = mapped_column(
        ForeignKey("consumer_groups.id", ondelete="CASCADE"), primary_key=True
    )
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    dlq_offset: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(String(1024))
    retry_count: Mapped[int] = mapped_column(Integer)
    failed_at_ms: Mapped[int] = mapped_column(BigInteger)


class DlqAuditEntry(Base):
    """Who replayed or deleted what in a group's DLQ, and when."""

    __tablename__ = "dlq_audit"
    __table_args__ = (Index("ix_dlq_audit_group", "group_id", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    group_id: Mapped[str] = mapped_column(ForeignKey("consumer_groups.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(16))
    message_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor_type: Mapped[str] = mapped_column(String(8))
    actor_id: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AlertEndpoint(Base):
    """An environment's alert webhook: where its events go, the secret they are signed with, and its
    breaker. One per project environment: a key manages its own environment's endpoint only.

    The breaker is ``closed`` below ``failures`` consecutive failures; ``open`` until ``open_until_ms``
    after that; then ``half-open``: one probe may go, whose success closes it and failure reopens it.
    """

    __tablename__ = "alert_endpoints"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True)
    environment: Mapped[str] = mapped_column(String(20), primary_key=True)
    url: Mapped[str] = mapped_column(String(2048))
    # Needed in clear to sign; never answered after the one-time reveal, never logged.
    secret: Mapped[str] = mapped_column(String(255))
    failures: Mapped[int] = mapped_column(Integer, default=0)
    open_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AlertEvent(Base):
    """The alert outbox: an event is written in the transaction that raises it and sent afterwards, so no
    alert is lost across restarts. ``claimed_until_ms`` keeps two dispatchers from sending it at once."""

    __tablename__ = "alert_events"
    __table_args__ = (Index("ix_alert_events_due", "status", "next_attempt_ms"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment: Mapped[str] = mapped_column(String(20))
    type: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_ms: Mapped[int] = mapped_column(BigInteger)
    claimed_until_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AlertAttempt(Base):
    """One try at delivering an alert event: what the endpoint answered, or why it could not."""

    __tablename__ = "alert_attempts"
    __table_args__ = (Index("ix_alert_attempts_environment", "project_id", "environment", "id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment: Mapped[str] = mapped_column(String(20))
    event_id: Mapped[str] = mapped_column(ForeignKey("alert_events.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    duration_ms: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class UsageRollup(Base):
    """Requests, messages, bytes and 429s of one API key and category in one minute, hour or day, added up
    from the usage-metering topic by the Spark usage job; the dashboard's usage charts read them."""

    __tablename__ = "usage_rollups"

    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    environment: Mapped[str] = mapped_column(String(20), primary_key=True)
    granularity: Mapped[str] = mapped_column(String(10), primary_key=True)  # minute | hour | day
    bucket_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    category: Mapped[str] = mapped_column(String(20), primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger, server_default="0")
    messages: Mapped[int] = mapped_column(BigInteger, server_default="0")
    bytes_in: Mapped[int] = mapped_column(BigInteger, server_default="0")
    bytes_out: Mapped[int] = mapped_column(BigInteger, server_default="0")
    rate_limited: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # The most requests in one second of the bucket (the larger of the runs' values across runs).
    peak_requests_per_second: Mapped[int] = mapped_column(BigInteger, server_default="0")


class UsageRollupProgress(Base):
    """How far into a usage source (the ``__usage`` topic) the rollups got: its next offset."""

    __tablename__ = "usage_rollup_progress"

    source: Mapped[str] = mapped_column(String(64), primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
