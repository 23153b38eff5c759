"""The replicated log engine on NATS JetStream (see ``engine``)."""

from app.stores.log.jetstream.config import JetStreamConfig, NatsLink
from app.stores.log.jetstream.engine import JetStreamLogEngine

__all__ = ["JetStreamConfig", "JetStreamLogEngine", "NatsLink"]
