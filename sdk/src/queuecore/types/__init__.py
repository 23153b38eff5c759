"""Typed models of the API's answers (and ``BatchMessage``, the one structured parameter)."""

from .alert import AlertDelivery as AlertDelivery
from .alert import AlertDeliveryPage as AlertDeliveryPage
from .alert import AlertEndpoint as AlertEndpoint
from .alert import AlertTestEvent as AlertTestEvent
from .batch_message import BatchMessage as BatchMessage
from .batch_result import BatchItem as BatchItem
from .batch_result import BatchResult as BatchResult
from .consumed_message import ConsumedMessage as ConsumedMessage
from .consumer_group import Breaker as Breaker
from .consumer_group import ConsumerGroup as ConsumerGroup
from .consumer_group import ConsumerGroupConfig as ConsumerGroupConfig
from .consumer_group import ConsumerGroupPartition as ConsumerGroupPartition
from .consumer_group import ConsumerGroupSummary as ConsumerGroupSummary
from .consumer_group import DeadLetter as DeadLetter
from .consumer_group import FilterStart as FilterStart
from .consumer_group import GroupPause as GroupPause
from .consumer_group import PartitionPosition as PartitionPosition
from .dead_letter import AuditActor as AuditActor
from .dead_letter import AuditEntry as AuditEntry
from .dead_letter import AuditPage as AuditPage
from .dead_letter import DeadLetterMessage as DeadLetterMessage
from .dead_letter import DeadLetterPage as DeadLetterPage
from .dead_letter import FailedAttempt as FailedAttempt
from .dead_letter import ReplayAllResult as ReplayAllResult
from .dead_letter import ReplayResult as ReplayResult
from .health import Health as Health
from .message import Message as Message
from .message import MessagePage as MessagePage
from .offset import Offset as Offset
from .offset import PartitionOffset as PartitionOffset
from .offset import SeekResult as SeekResult
from .publish_result import PublishResult as PublishResult
from .push import Push as Push
from .push import PushAttempt as PushAttempt
from .push import PushConfig as PushConfig
from .push import PushSecret as PushSecret
from .schedule import Schedule as Schedule
from .schedule import ScheduleRun as ScheduleRun
from .topic import Topic as Topic
from .topic_detail import PartitionDetail as PartitionDetail
from .topic_detail import Replica as Replica
from .topic_detail import TopicDetail as TopicDetail

__all__ = [
    "AlertDelivery",
    "AlertDeliveryPage",
    "AlertEndpoint",
    "AlertTestEvent",
    "AuditActor",
    "AuditEntry",
    "AuditPage",
    "BatchItem",
    "BatchMessage",
    "BatchResult",
    "Breaker",
    "ConsumedMessage",
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
    "Message",
    "MessagePage",
    "Offset",
    "PartitionDetail",
    "PartitionOffset",
    "PartitionPosition",
    "PublishResult",
    "ReplayAllResult",
    "ReplayResult",
    "Replica",
    "Schedule",
    "ScheduleRun",
    "SeekResult",
    "Topic",
    "TopicDetail",
]
