"""Metadata tables (SQLAlchemy 2). Postgres in production, SQLite when embedded; Alembic owns the schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
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
    dead_letter_alert_armed: Mapped[bool] = mapped_column(
        "dlq_alert_armed", Boolean, default=True, server_default="1"
    )
    # Flow control and filter (app/broker/delivery/flow.py, app/broker/filters.py); None: none.
    max_in_flight: Mapped[int | None] = mapped_column(Integer, nullable=True)
    rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    filter: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    # A pause: why ("user", "dlq-breaker"; None: not paused) and until when (None: until resumed).
    paused_reason: Mapped[str | None] = mapped_column(String(16), nullable=True, default=None)
    paused_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)
    # The DLQ breaker's counts of delivery outcomes in the window that began at ``breaker_window_ms``.
    breaker_window_ms: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    breaker_acked: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
    breaker_failed: Mapped[int] = mapped_column(BigInteger, server_default="0", default=0)
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
    # Of the group's maxInFlight, how many this member may hold (app/broker/delivery/flow.py).
    in_flight_claim: Mapped[int | None] = mapped_column(Integer, nullable=True)


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
    # The failed attempts before the last one, as JSON ``[[at_ms, reason], …]`` (the dead letter's history).
    failures: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)


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


class DeadLetterAuditEntry(Base):
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


class PushEndpoint(Base):
    """A push group's URL (``push`` in the group config): where each message is POSTed, how, and the
    secrets deliveries are signed with. A group without a row is no push group.

    ``secret`` signs every delivery; after a rotation ``previous_secret`` signs too until
    ``previous_until_ms`` (24 h), so receivers can switch without a gap. Both are kept sealed. The breaker
    (``breaker_failures`` in a row, open until ``breaker_open_until_ms``) is written on changes only, for
    describe and the dashboard; the worker of each node keeps its own in memory.
    """

    __tablename__ = "push_endpoints"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("consumer_groups.id", ondelete="CASCADE"), primary_key=True
    )
    url: Mapped[str] = mapped_column(String(2048))
    max_concurrency: Mapped[int] = mapped_column(Integer)
    rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    timeout: Mapped[str] = mapped_column(String(16))
    timeout_ms: Mapped[int] = mapped_column(BigInteger)
    ordered: Mapped[bool] = mapped_column(Boolean)
    mode: Mapped[str] = mapped_column(String(16))
    # Needed in clear to sign; never answered after the one-time reveal, never logged.
    secret: Mapped[str] = mapped_column(String(255))
    previous_secret: Mapped[str | None] = mapped_column(String(255), nullable=True)
    previous_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    breaker_failures: Mapped[int] = mapped_column(Integer, default=0)
    breaker_open_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PushAttempt(Base):
    """One POST of a message to a push group's URL: what came back (``status`` None: no answer) and how
    long it took. Written in batches; the newest ``push_attempts.KEEP`` per group are kept."""

    __tablename__ = "push_attempts"
    __table_args__ = (Index("ix_push_attempts_group", "group_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(ForeignKey("consumer_groups.id", ondelete="CASCADE"))
    message_id: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    latency_ms: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)


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


class Schedule(Base):
    """A schedule of one topic: a message published at every due time of its ``cron`` (in ``timezone``)
    or ``every`` (a period in milliseconds from ``anchor_ms``).

    ``next_run_ms`` is the due time to publish next; the runner of any API node claims it by a conditional
    update on that value (``claimed_until_ms``: nobody else takes the run before then), publishes with an
    idempotency key of the schedule and the due time, then moves ``next_run_ms`` on in the transaction
    that records the run, fenced on the due time it published (``app/broker/schedules/runner.py``).
    """

    __tablename__ = "schedules"
    __table_args__ = (
        Index("ix_schedules_scope", "project_id", "environment", "id"),
        Index("ix_schedules_due", "status", "next_run_ms"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    environment: Mapped[str] = mapped_column(String(20))
    topic_id: Mapped[str] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"), index=True)
    cron: Mapped[str | None] = mapped_column(String(255), nullable=True)
    every: Mapped[str | None] = mapped_column(String(16), nullable=True)
    every_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    anchor_ms: Mapped[int] = mapped_column(BigInteger)
    timezone: Mapped[str] = mapped_column(String(64))
    # The message each run publishes: ``data`` as JSON text, its key and headers.
    data: Mapped[str] = mapped_column(Text)
    key: Mapped[str | None] = mapped_column(String(4096), nullable=True)
    headers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # active | paused
    next_run_ms: Mapped[int] = mapped_column(BigInteger)
    claimed_until_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ScheduleRun(Base):
    """One published run of a schedule: its due time and where its message landed (the last few kept)."""

    __tablename__ = "schedule_runs"

    schedule_id: Mapped[str] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"), primary_key=True)
    at_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    message_id: Mapped[str] = mapped_column(String(64))
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    published_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
