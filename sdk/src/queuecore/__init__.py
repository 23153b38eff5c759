"""QueueCore's Python SDK.

::

    from queuecore import QueueCore

    client = QueueCore()  # reads QUEUECORE_API_KEY (and QUEUECORE_BASE_URL)
    client.topics.create("order.events", retention="30d", partitions=6)
    result = client.publish("order.events", {"type": "order.created", "orderId": "ord_92jf8x"})
    print(result.offset, result.partition)
"""

from . import pagination, resources, types, webhooks
from ._client import AsyncQueueCore, QueueCore
from ._constants import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT
from ._consumer import AsyncConsumer, RebalanceEvent
from ._exceptions import (
    AckError,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QueueCoreError,
    RateLimitError,
    ServiceUnavailableError,
)
from ._ratelimit import RateLimit
from ._raw_response import APIResponse
from ._sync_consumer import Consumer
from ._version import __version__
from .pagination import AsyncCursorPage, AsyncPaginator, SyncCursorPage
from .types import (
    AlertDelivery,
    AlertDeliveryPage,
    AlertEndpoint,
    AlertTestEvent,
    AuditActor,
    AuditEntry,
    AuditPage,
    BatchItem,
    BatchMessage,
    BatchResult,
    Breaker,
    ConsumedMessage,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupPartition,
    ConsumerGroupSummary,
    DeadLetter,
    DeadLetterMessage,
    DeadLetterPage,
    FailedAttempt,
    FilterStart,
    GroupPause,
    Health,
    Message,
    MessagePage,
    Offset,
    PartitionDetail,
    PartitionOffset,
    PartitionPosition,
    PublishResult,
    Push,
    PushAttempt,
    PushConfig,
    PushSecret,
    ReplayAllResult,
    ReplayResult,
    Replica,
    Schedule,
    ScheduleRun,
    SeekResult,
    Topic,
    TopicDetail,
)
from .webhooks import WebhookVerificationError

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "APIConnectionError",
    "APIError",
    "APIResponse",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AckError",
    "AlertDelivery",
    "AlertDeliveryPage",
    "AlertEndpoint",
    "AlertTestEvent",
    "AsyncConsumer",
    "AsyncCursorPage",
    "AsyncPaginator",
    "AsyncQueueCore",
    "AuditActor",
    "AuditEntry",
    "AuditPage",
    "AuthenticationError",
    "BadRequestError",
    "BatchItem",
    "BatchMessage",
    "BatchResult",
    "Breaker",
    "ConflictError",
    "ConsumedMessage",
    "Consumer",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupPartition",
    "ConsumerGroupSummary",
    "DeadLetter",
    "DeadLetterMessage",
    "DeadLetterPage",
    "FailedAttempt",
    "FilterStart",
    "GroupPause",
    "Health",
    "InternalServerError",
    "Message",
    "MessagePage",
    "NotFoundError",
    "Offset",
    "PartitionDetail",
    "PartitionOffset",
    "PartitionPosition",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PublishResult",
    "Push",
    "PushAttempt",
    "PushConfig",
    "PushSecret",
    "QueueCore",
    "QueueCoreError",
    "RateLimit",
    "RateLimitError",
    "RebalanceEvent",
    "ReplayAllResult",
    "ReplayResult",
    "Replica",
    "Schedule",
    "ScheduleRun",
    "SeekResult",
    "ServiceUnavailableError",
    "SyncCursorPage",
    "Topic",
    "TopicDetail",
    "WebhookVerificationError",
    "__version__",
    "pagination",
    "resources",
    "types",
    "webhooks",
]

# Clients, pages and exceptions show as queuecore.X rather than queuecore._client.X (as httpx does), so
# tracebacks and reprs name the public path. Models keep their own modules (pydantic resolves names there).
_public: tuple[type, ...] = (
    QueueCore,
    AsyncQueueCore,
    SyncCursorPage,
    AsyncCursorPage,
    AsyncPaginator,
    Consumer,
    AsyncConsumer,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QueueCoreError,
    RateLimitError,
    ServiceUnavailableError,
    WebhookVerificationError,
    BadRequestError,
    AckError,
    APIResponse,
    RateLimit,
    RebalanceEvent,
)
for _obj in _public:
    _obj.__module__ = "queuecore"
del _obj, _public


def __getattr__(name: str) -> object:
    # Deprecated names, kept working for existing code; each access warns once per call site.
    if name == "ValidationError":
        import warnings

        warnings.warn(
            "queuecore.ValidationError is deprecated: use queuecore.BadRequestError (the same class)",
            DeprecationWarning,
            stacklevel=2,
        )
        return BadRequestError
    raise AttributeError(f"module 'queuecore' has no attribute {name!r}")
