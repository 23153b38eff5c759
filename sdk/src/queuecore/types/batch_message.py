from datetime import datetime, timedelta
from typing import Any, Optional, Union

import pydantic
from pydantic import ConfigDict

__all__ = ["BatchMessage"]


class BatchMessage(pydantic.BaseModel):
    """One message of ``publish_batch`` with its options.

    A plain value (a dict, list, string, number, ``None``) given to ``publish_batch`` is always a message's
    data; wrap it in ``BatchMessage`` to set a key, headers, a partition or an idempotency key::

        client.publish_batch("order.events", [
            BatchMessage(data={"orderId": "ord_1"}, key="ord_1"),
            {"orderId": "ord_2"},  # data only
        ])
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    data: Any
    key: Optional[str] = None
    headers: Optional[dict[str, str]] = None
    partition: Optional[int] = None
    idempotency_key: Optional[str] = None
    """Made for you (a uuid4) when not given, so a retried batch never duplicates."""
    delay: Union[str, float, timedelta, None] = None
    """Deliver to consumer groups this much later (``"90s"``, seconds, a ``timedelta``; at most 30 days)."""
    deliver_at: Union[datetime, int, str, None] = None
    """Or deliver from this time on (not with ``delay``)."""
    ttl: Union[str, float, timedelta, None] = None
    """Never deliver it once this long has passed since the publish (a DLQ gets it, reason ``expired``)."""
    expires_at: Union[datetime, int, str, None] = None
    """Or never deliver it from this time on (not with ``ttl``)."""
