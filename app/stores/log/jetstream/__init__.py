"""The replicated log engine on NATS JetStream (see ``engine``)."""

from app.stores.log.jetstream.engine import JetStreamConfig, JetStreamLogEngine

__all__ = ["JetStreamConfig", "JetStreamLogEngine"]
