"""Resource namespaces of the clients: ``client.topics``, ``client.messages``, ``client.consumer_groups``,
``client.offsets``, ``client.dlq``, ``client.alerts``, ``client.schedules``."""

from .alerts import Alerts as Alerts
from .alerts import AsyncAlerts as AsyncAlerts
from .consumer_groups import AsyncConsumerGroups as AsyncConsumerGroups
from .consumer_groups import ConsumerGroups as ConsumerGroups
from .dlq import AsyncDlq as AsyncDlq
from .dlq import Dlq as Dlq
from .messages import AsyncMessages as AsyncMessages
from .messages import Messages as Messages
from .offsets import AsyncOffsets as AsyncOffsets
from .offsets import Offsets as Offsets
from .schedules import AsyncSchedules as AsyncSchedules
from .schedules import Schedules as Schedules
from .topics import AsyncTopics as AsyncTopics
from .topics import Topics as Topics

__all__ = [
    "Alerts",
    "AsyncAlerts",
    "AsyncConsumerGroups",
    "AsyncDlq",
    "AsyncMessages",
    "AsyncOffsets",
    "AsyncSchedules",
    "AsyncTopics",
    "ConsumerGroups",
    "Dlq",
    "Messages",
    "Offsets",
    "Schedules",
    "Topics",
]
