"""Client defaults. Every knob here can be overridden per client (``QueueCore(timeout=..., max_retries=...)``)."""

import httpx

DEFAULT_BASE_URL = "http://127.0.0.1:8080"

# Publishes answer once the message is durable (fsync'd), so allow more than a typical read; connecting
# should be quick, and a slow connect is better retried than waited on.
DEFAULT_TIMEOUT = httpx.Timeout(timeout=30.0, connect=5.0)

DEFAULT_MAX_RETRIES = 2
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0

# A server's Retry-After is honoured up to this many seconds; longer waits are clamped to it.
MAX_RETRY_AFTER = 60.0

DEFAULT_CONNECTION_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)

# The largest batch the API takes in one request.
MAX_BATCH_SIZE = 1000
