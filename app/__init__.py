"""QueueCore: a managed pub/sub message broker."""

__version__ = "0.1.0"
