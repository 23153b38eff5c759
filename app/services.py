"""``Services``: everything stateful the process runs, built once by ``app.main``'s lifespan and handed to
both edges (``app.api`` through ``deps.ServicesDep``, ``app.dashboard`` through its routes), neither of
which imports the other."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from app.broker.alerts import AlertDispatcher
from app.broker.connections import ConnectionRegistry
from app.broker.delivery.roster import PushRoster
from app.broker.delivery.url_workers import UrlWorkers
from app.broker.groups import KnownGroups
from app.broker.keys import KeyAuthenticator
from app.broker.publishing import Publisher
from app.broker.push_groups import PushPolicy
from app.broker.stored_bytes import StoredBytes
from app.broker.usage import UsageMeter
from app.kit.clock import SYSTEM_CLOCK, Clock
from app.settings import Settings
from app.stores.limits.protocol import RateLimiter
from app.stores.log.protocol import LogEngine
from app.stores.metadata.protocol import MetadataStore


@dataclass
class Services:
    """Everything stateful, built once in ``lifespan`` and closed in reverse order."""

    settings: Settings
    metadata: MetadataStore
    log: LogEngine
    limiter: RateLimiter
    keys: KeyAuthenticator
    publisher: Publisher
    usage: UsageMeter
    registry: CollectorRegistry
    alerts: AlertDispatcher
    connections: ConnectionRegistry
    stored_bytes: StoredBytes
    known_groups: KnownGroups
    push_policy: PushPolicy
    push_workers: UrlWorkers
    push_members: PushRoster  # the WebSocket push members of this process, per group
    # What timeouts and due times are compared with where the code takes a clock (``app/kit/clock.py``);
    # an app under test may be given one it moves.
    clock: Clock = SYSTEM_CLOCK
    # Set on SIGTERM (``app/api/draining.py``): health answers 503 ``draining`` so balancers move on.
    draining: bool = False
