"""Alert webhooks: a project environment's endpoint, the outbox of events, and the dispatcher.

- ``endpoint`` — one per project environment: an http(s) URL and a signing secret, and the SSRF rule
  that keeps deliveries off internal addresses (checked when set and before every delivery).
- ``outbox`` — ``enqueue`` writes an event in the caller's transaction, so an alert exists exactly when
  what raised it committed; the attempts made are read back from here too.
- ``dispatcher`` — one task per server process claims due events, signs and POSTs them, retries with
  backoff and keeps a circuit breaker per endpoint.
- ``policy`` — the frozen ``AlertPolicy`` all three go by, built from the settings in one place.

The names the edge, the CLI and the dead-letter queue use are re-exported here.
"""

from app.broker.alerts.dispatcher import (
    SIGNATURE_HEADER,
    USER_AGENT,
    AlertDispatcher,
    Outcome,
    backoff_ms,
    sign,
)
from app.broker.alerts.endpoint import (
    BlockedUrl,
    Destination,
    EndpointView,
    breaker_state,
    check_url,
    delete_endpoint,
    get_endpoint,
    new_secret,
    set_endpoint,
)
from app.broker.alerts.outbox import AttemptPage, deliveries, enqueue, send_test_event
from app.broker.alerts.policy import AlertPolicy

__all__ = [
    "SIGNATURE_HEADER",
    "USER_AGENT",
    "AlertDispatcher",
    "AlertPolicy",
    "AttemptPage",
    "BlockedUrl",
    "Destination",
    "EndpointView",
    "Outcome",
    "backoff_ms",
    "breaker_state",
    "check_url",
    "delete_endpoint",
    "deliveries",
    "enqueue",
    "get_endpoint",
    "new_secret",
    "send_test_event",
    "set_endpoint",
    "sign",
]
