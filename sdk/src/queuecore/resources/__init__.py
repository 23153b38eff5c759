"""Resource namespaces of the clients: ``client.topics``, ``client.messages``, ``client.consumer_groups``,
``client.offsets``."""

from .consumer_groups import AsyncConsumerGroups as AsyncConsumerGroups
from .consumer_groups import ConsumerGroups as ConsumerGroups
from .messages import AsyncMessages as AsyncMessages
from .messages import Messages as Messages
from .offsets import AsyncOffsets as AsyncOffsets
from .offsets import Offsets as Offsets
from .topics import AsyncTopics as AsyncTopics
from .topics import Topics as Topics

__all__ = [
    "AsyncConsumerGroups",
    "AsyncMessages",
    "AsyncOffsets",
    "AsyncTopics",
    "ConsumerGroups",
    "Messages",
    "Offsets",
    "Topics",
]
