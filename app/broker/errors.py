"""Domain errors: each names the rule that was broken and carries the wire ``code``.

    BrokerError
     ├── NotFound            TopicNotFound, GroupNotFound, MessageNotFound, MemberNotFound,
     │                       ProjectNotFound, ApiKeyNotFound, UserNotFound
     ├── Conflict            TopicAlreadyExists, KeyLimitReached, GroupActive, StaleGeneration,
     │                       ProjectAlreadyExists, UserAlreadyExists
     ├── InvalidRequest      a value the domain refuses (with optional field details); OffsetOutOfRange
     ├── PayloadTooLarge
 ├── RateLimitExceeded
     ├── KeyNoLongerValid    an open connection's key was revoked (or its project deleted)
     └── Unavailable         a store cannot meet its promise right now

A store that is down raises its own ``StoreUnavailable`` (``app/stores/errors.py``), which carries a
wire code too: ``CODED_ERRORS`` is what a caller catches to answer either kind with its code.

The HTTP edge maps them to the error envelope in one table (``app/errors.py``); the CLI maps them to
exit codes. Nothing here knows about HTTP.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

from app.stores.errors import StoreUnavailable


class BrokerError(Exception):
    """Base of every domain error."""

    code: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(BrokerError):
    code = "NOT_FOUND"


class TopicNotFound(NotFound):
    code = "TOPIC_NOT_FOUND"

    def __init__(self, name: str) -> None:
        super().__init__(f"The topic '{name}' does not exist in the current environment.")


class GroupNotFound(NotFound):
    code = "GROUP_NOT_FOUND"


class MessageNotFound(NotFound):
    code = "MESSAGE_NOT_FOUND"


class MemberNotFound(NotFound):
    code = "MEMBER_NOT_FOUND"


class AlertEndpointNotFound(NotFound):
    code = "ALERT_ENDPOINT_NOT_FOUND"


class ProjectNotFound(NotFound):
    def __init__(self, ref: str) -> None:
        super().__init__(f"No project with id or name '{ref}'.")


class ApiKeyNotFound(NotFound):
    def __init__(self, key_id: str) -> None:
        super().__init__(f"No API key with id '{key_id}'.")


class UserNotFound(NotFound):
    pass


class Conflict(BrokerError):
    code = "CONFLICT"


class TopicAlreadyExists(Conflict):
    code = "TOPIC_ALREADY_EXISTS"

    def __init__(self, name: str) -> None:
        super().__init__(f"A topic named '{name}' already exists in the current environment.")


class KeyLimitReached(Conflict):
    code = "KEY_LIMIT_REACHED"

    def __init__(self, environment: str) -> None:
        super().__init__(
            f"The {environment} environment already has two active API keys; revoke one before creating another."
        )


class GroupActive(Conflict):
    code = "GROUP_ACTIVE"


class StaleGeneration(Conflict):
    code = "STALE_GENERATION"


class ProjectAlreadyExists(Conflict):
    def __init__(self, name: str) -> None:
        super().__init__(f"A project named '{name}' already exists.")


class UserAlreadyExists(Conflict):
    def __init__(self, email: str) -> None:
        super().__init__(f"A user with email '{email}' already exists.")


class InvalidRequest(BrokerError):
    code = "INVALID_REQUEST"

    @classmethod
    def field(cls, field: str, issue: str) -> InvalidRequest:
        """A refusal of one field's value, with the field named in ``details``."""
        return cls(f"Invalid value for '{field}': {issue}", details=[{"field": field, "issue": issue}])


class OffsetOutOfRange(InvalidRequest):
    """A read from beyond the end of a partition; ``details`` give both bounds."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, field: str, offset: int, earliest: int, latest: int) -> None:
        issue = f"{offset} is beyond the partition's latest offset {latest} (the next to be written)"
        super().__init__(
            f"Invalid value for '{field}': {issue}.",
            details=[{"field": field, "issue": issue, "earliestOffset": earliest, "latestOffset": latest}],
        )


class RateLimitExceeded(BrokerError):
    """More than a limit allows in a window (e.g. client frames per second on one connection)."""

    code = "RATE_LIMIT_EXCEEDED"


class KeyNoLongerValid(BrokerError):
    """The key an open connection was authenticated with was revoked, or its project deleted."""

    code = "INVALID_API_KEY"

    def __init__(self) -> None:
        super().__init__("The API key of this connection has been revoked.")


class PayloadTooLarge(BrokerError):
    code = "PAYLOAD_TOO_LARGE"


class Unavailable(BrokerError):
    code = "SERVICE_UNAVAILABLE"


CodedError: TypeAlias = BrokerError | StoreUnavailable
"""An error answered with its wire ``code``: a domain error, or a store that cannot serve right now."""

CODED_ERRORS: tuple[type[BrokerError], type[StoreUnavailable]] = (BrokerError, StoreUnavailable)
"""``except CODED_ERRORS`` catches every ``CodedError``."""
