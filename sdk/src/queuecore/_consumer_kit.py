"""What a consumer is made of besides its engine: the queue of settlements waiting to be sent, and the
event its ``"rebalance"`` handlers get (as the Node.js SDK's consumer-kit)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

__all__ = ["RebalanceEvent"]


@dataclass(frozen=True)
class RebalanceEvent:
    """What ``consumer.on("rebalance", ...)`` handlers get after each join and rebalance: the partitions
    this member holds from now on (the same event, with the same fields, in every QueueCore SDK)."""

    member_id: str | None
    generation_id: int
    assignments: list[int]


# A nack to send: message id, reason, delay, and whether it goes to the dead-letter queue at once.
Nack = tuple[str, "str | None", "str | float | None", bool]


class _Settler:
    """Thread-safe queue of acks, nacks and extends; the engine sends them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acks: list[str] = []
        self.nacks: list[Nack] = []
        self.extends: list[tuple[str, float]] = []
        self.wake: Callable[[], None] | None = None
        self.wake_on_ack = False  # push: acks go out within milliseconds; pull: on the flush interval

    def ack(self, message_id: str) -> None:
        with self._lock:
            self.acks.append(message_id)
        if self.wake_on_ack and self.wake is not None:
            self.wake()

    def nack(
        self, message_id: str, reason: str | None, delay: str | float | None, dead_letter: bool = False
    ) -> None:
        with self._lock:
            self.nacks.append((message_id, reason, delay, dead_letter))
        if self.wake is not None:
            self.wake()

    def extend(self, message_id: str, seconds: float) -> None:
        with self._lock:
            self.extends.append((message_id, seconds))
        if self.wake is not None:
            self.wake()

    def take(
        self,
    ) -> tuple[list[str], list[Nack], list[tuple[str, float]]]:
        with self._lock:
            acks, nacks, extends = self.acks, self.nacks, self.extends
            self.acks, self.nacks, self.extends = [], [], []
        # An extend of a message acked or nacked in the same batch is dropped: settling ends the lease
        # anyway, and as acks and nacks go first the extend would reach the server after them and be
        # refused (ACK_EXPIRED, an AckError the application never caused).
        settled = set(acks) | {nack[0] for nack in nacks}
        if settled:
            extends = [item for item in extends if item[0] not in settled]
        return acks, nacks, extends

    def pending(self) -> bool:
        with self._lock:
            return bool(self.acks or self.nacks or self.extends)
