"""Typed models of the API's answers (and ``BatchMessage``, the one structured parameter)."""

from .batch_message import BatchMessage as BatchMessage
from .batch_result import BatchItem as BatchItem
from .batch_result import BatchResult as BatchResult
from .health import Health as Health
from .message import Message as Message
from .message import MessagePage as MessagePage
from .publish_result import PublishResult as PublishResult
from .topic import Topic as Topic
from .topic_detail import PartitionDetail as PartitionDetail
from .topic_detail import TopicDetail as TopicDetail

__all__ = [
    "BatchItem",
    "BatchMessage",
    "BatchResult",
    "Health",
    "Message",
    "MessagePage",
    "PartitionDetail",
    "PublishResult",
    "Topic",
    "TopicDetail",
]
