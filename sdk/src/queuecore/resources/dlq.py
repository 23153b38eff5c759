"""``client.dlq``: a consumer group's dead-letter queue: inspect, replay, replay all, delete, audit."""

from __future__ import annotations

from typing import Any

from .._base_client import RequestOptions, parse_model
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..types.dead_letter import AuditPage, DeadLetterPage, ReplayAllResult, ReplayResult

__all__ = ["AsyncDlq", "Dlq"]


def _path(topic: str, group: str) -> str:
    return f"/v1/topics/{path_segment(topic)}/groups/{path_segment(group)}/dlq"


def _inspect_options(topic: str, group: str, limit: int | None, cursor: str | None) -> RequestOptions:
    return RequestOptions("GET", _path(topic, group), params={"limit": limit, "cursor": cursor})


def _replay_options(topic: str, group: str, message_id: str) -> RequestOptions:
    return RequestOptions("POST", f"{_path(topic, group)}/replay", json={"messageId": message_id})


def _replay_all_options(topic: str, group: str, rate: float | None) -> RequestOptions:
    body: dict[str, Any] = {} if rate is None else {"rate": rate}
    return RequestOptions("POST", f"{_path(topic, group)}/replay-all", json=body)


def _delete_options(topic: str, group: str, message_id: str) -> RequestOptions:
    return RequestOptions("DELETE", f"{_path(topic, group)}/{path_segment(message_id)}")


def _audit_options(topic: str, group: str, limit: int | None, cursor: str | None) -> RequestOptions:
    return RequestOptions("GET", f"{_path(topic, group)}/audit", params={"limit": limit, "cursor": cursor})


class Dlq(SyncAPIResource):
    """A consumer group's dead-letter queue."""

    def inspect(
        self, topic: str, *, group: str, limit: int | None = None, cursor: str | None = None
    ) -> DeadLetterPage:
        """One page of the group's dead letters (oldest first) and ``total``, the DLQ's depth; pass
        ``cursor=page.next_cursor`` for the next. A group without a DLQ lists an empty one.

        Raises:
            NotFoundError: no such topic or group.
        """
        return parse_model(
            DeadLetterPage, self._client.request(_inspect_options(topic, group, limit, cursor))
        )

    def replay(self, topic: str, group: str, *, message_id: str) -> ReplayResult:
        """Send one dead letter back to ``group`` (only), under its original id, with ``attempt`` 1 and a
        fresh retry budget.

        Raises:
            NotFoundError: the message is not in this DLQ (``MESSAGE_NOT_FOUND``).
        """
        return parse_model(ReplayResult, self._client.request(_replay_options(topic, group, message_id)))

    def replay_all(self, topic: str, group: str, *, rate: float | None = None) -> ReplayAllResult:
        """Send every dead letter back to ``group``, at most ``rate`` per second when given; returns once
        done, with the count."""
        return parse_model(ReplayAllResult, self._client.request(_replay_all_options(topic, group, rate)))

    def delete(self, topic: str, group: str, *, message_id: str) -> None:
        """Remove one dead letter for good."""
        self._client.request(_delete_options(topic, group, message_id))

    def audit(
        self, topic: str, group: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AuditPage:
        """Every replay and delete of the DLQ (who, what, when), newest first."""
        return parse_model(AuditPage, self._client.request(_audit_options(topic, group, limit, cursor)))


class AsyncDlq(AsyncAPIResource):
    """A consumer group's dead-letter queue."""

    async def inspect(
        self, topic: str, *, group: str, limit: int | None = None, cursor: str | None = None
    ) -> DeadLetterPage:
        """One page of the group's dead letters. See ``Dlq.inspect``."""
        response = await self._client.request(_inspect_options(topic, group, limit, cursor))
        return parse_model(DeadLetterPage, response)

    async def replay(self, topic: str, group: str, *, message_id: str) -> ReplayResult:
        """Send one dead letter back to the group. See ``Dlq.replay``."""
        return parse_model(
            ReplayResult, await self._client.request(_replay_options(topic, group, message_id))
        )

    async def replay_all(self, topic: str, group: str, *, rate: float | None = None) -> ReplayAllResult:
        """Send every dead letter back to the group. See ``Dlq.replay_all``."""
        return parse_model(
            ReplayAllResult, await self._client.request(_replay_all_options(topic, group, rate))
        )

    async def delete(self, topic: str, group: str, *, message_id: str) -> None:
        """Remove one dead letter for good."""
        await self._client.request(_delete_options(topic, group, message_id))

    async def audit(
        self, topic: str, group: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AuditPage:
        """Every replay and delete of the DLQ, newest first."""
        return parse_model(AuditPage, await self._client.request(_audit_options(topic, group, limit, cursor)))
