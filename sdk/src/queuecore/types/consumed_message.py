from typing import Any, Optional, Union

from pydantic import PrivateAttr

from .._models import Timestamp
from .message import Message

__all__ = ["ConsumedMessage"]


class ConsumedMessage(Message):
    """A message delivered to a consumer: settle it with ``ack()``, ``nack(reason)`` or ``extend(seconds)``.

    Settling never blocks: the consumer sends acks in batches (at least every ~100 ms and on ``stop()``),
    nacks and extends as soon as it can.
    """

    attempt: int
    """1 on first delivery, +1 on every redelivery."""
    ack_deadline: Timestamp
    """Unacked by then, the message is redelivered (``extend`` moves it)."""

    _settle: Optional[Any] = PrivateAttr(default=None)

    def ack(self) -> None:
        """Mark the message processed; it is not delivered to this group again."""
        if self._settle is not None:
            self._settle.ack(self.id)

    def nack(
        self,
        reason: Optional[str] = None,
        delay: Union[str, float, None] = None,
        *,
        dead_letter: bool = False,
    ) -> None:
        """Give the message back for redelivery (after ``delay``: ``"30s"`` or seconds), or to the
        dead-letter queue once its retries are spent; ``dead_letter=True`` moves it there at once
        (the group must have a dead-letter queue)."""
        if self._settle is not None:
            self._settle.nack(self.id, reason, delay, dead_letter)

    def extend(self, seconds: float) -> None:
        """Move the ack deadline to ``seconds`` from now (1 to 43200)."""
        if self._settle is not None:
            self._settle.extend(self.id, seconds)
