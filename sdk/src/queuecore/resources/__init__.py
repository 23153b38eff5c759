"""Resource namespaces of the clients: ``client.topics``, ``client.messages``."""

from .messages import AsyncMessages as AsyncMessages
from .messages import Messages as Messages
from .topics import AsyncTopics as AsyncTopics
from .topics import Topics as Topics

__all__ = ["AsyncMessages", "AsyncTopics", "Messages", "Topics"]
