"""``client.consumer_groups``: list, describe, update, delete groups and reset a stopped group's offsets."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, Union

from .._base_client import RequestOptions, parse_model
from .._resource import AsyncAPIResource, SyncAPIResource, path_segment
from ..types.consumer_group import (
    ConsumerGroup,
    ConsumerGroupSummary,
    DeadLetter,
    GroupPause,
    PartitionPosition,
)
from ..types.push import Push, PushAttempt, PushSecret
from ._lists import parse_list

__all__ = ["AsyncConsumerGroups", "ConsumerGroups", "DeadLetterParam", "PushParam", "ResetTo"]

ResetTo = Union[Literal["earliest", "latest"], int]
DeadLetterParam = Union[DeadLetter, Mapping[str, Any], None]
PushParam = Union[Push, Mapping[str, Any], None]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Any = _Unset()


def dead_letter_wire(dead_letter: DeadLetterParam) -> dict[str, Any] | None:
    """``DeadLetter(...)`` or a dict of its snake_case fields as the wire's ``deadLetter`` object."""
    if dead_letter is None:
        return None
    model = (
        dead_letter if isinstance(dead_letter, DeadLetter) else DeadLetter.model_validate(dict(dead_letter))
    )
    wire = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    if "breaker" in model.model_fields_set and model.breaker is None:
        wire["breaker"] = None  # given as None: the breaker is turned off
    return wire


def push_wire(push: PushParam) -> dict[str, Any] | None:
    """``Push(...)`` or a dict of its snake_case fields as the wire's ``push`` object (``rate=None`` set
    explicitly is sent: it removes the limit)."""
    if push is None:
        return None
    model = push if isinstance(push, Push) else Push.model_validate(dict(push))
    wire = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    if "rate" in model.model_fields_set and model.rate is None:
        wire["rate"] = None
    return wire


def _push_options(topic: str, group: str, what: str, limit: int | None = None) -> RequestOptions:
    if what == "rotate-secret":
        return RequestOptions("POST", f"{_path(topic, group)}/push/rotate-secret")
    return RequestOptions("GET", f"{_path(topic, group)}/push/attempts", params={"limit": limit})


def _path(topic: str, group: str | None = None) -> str:
    path = f"/v1/topics/{path_segment(topic)}/groups"
    return path if group is None else f"{path}/{path_segment(group)}"


def _update_options(
    topic: str,
    group: str,
    ack_timeout: str | None,
    session_timeout: str | None,
    dead_letter: Any,
    push: Any = _UNSET,
    *,
    max_in_flight: Any = _UNSET,
    rate: Any = _UNSET,
    filter: Any = _UNSET,
) -> RequestOptions:
    body: dict[str, Any] = {}
    if ack_timeout is not None:
        body["ackTimeout"] = ack_timeout
    if session_timeout is not None:
        body["sessionTimeout"] = session_timeout
    if dead_letter is not _UNSET:
        body["deadLetter"] = dead_letter_wire(dead_letter)
    # Flow control: omitted keeps the group's value, ``None`` removes it.
    for wire, value in (("maxInFlight", max_in_flight), ("rate", rate), ("filter", filter)):
        if value is not _UNSET:
            body[wire] = value
    if push is not _UNSET:
        body["push"] = push_wire(push)
    return RequestOptions("PUT", _path(topic, group), json=body)


def _reset_options(topic: str, group: str, to: ResetTo) -> RequestOptions:
    return RequestOptions("POST", f"{_path(topic, group)}/reset-offsets", json={"to": to})


def _pause_options(topic: str, group: str, until: datetime | int | str | None) -> RequestOptions:
    body: dict[str, Any] = {}
    if isinstance(until, datetime):
        if until.tzinfo is None:
            raise ValueError("until needs a time zone (e.g. datetime.now(timezone.utc))")
        body["until"] = until.isoformat()
    elif until is not None:
        body["until"] = until
    return RequestOptions("POST", f"{_path(topic, group)}/pause", json=body)


class ConsumerGroups(SyncAPIResource):
    """Consumer groups of a topic."""

    def list(self, topic: str) -> list[ConsumerGroupSummary]:
        """The topic's groups with their live member count and total lag.

        Raises:
            NotFoundError: no such topic.
        """
        return parse_list(ConsumerGroupSummary, self._client.request(RequestOptions("GET", _path(topic))))

    def describe(self, topic: str, group: str) -> ConsumerGroup:
        """A group: per partition its consumer, committed offset and lag; and its config.

        Raises:
            NotFoundError: no such topic (``TOPIC_NOT_FOUND``) or group (``GROUP_NOT_FOUND``).
        """
        return parse_model(ConsumerGroup, self._client.request(RequestOptions("GET", _path(topic, group))))

    def update(
        self,
        topic: str,
        group: str,
        *,
        ack_timeout: str | None = None,
        session_timeout: str | None = None,
        dead_letter: DeadLetterParam = _UNSET,
        max_in_flight: int | None = _UNSET,
        rate: float | None = _UNSET,
        filter: str | None = _UNSET,
        push: PushParam = _UNSET,
    ) -> ConsumerGroup:
        """Create the group or merge the given settings into its config; omitted settings are kept.

        Args:
            ack_timeout: ``1s`` to ``12h``.
            session_timeout: ``2s`` to ``5m``.
            dead_letter: ``DeadLetter(max_retries=, retry_delay=, alert_threshold=)`` or a dict of those
                fields; ``None`` removes the dead-letter queue.
            max_in_flight: unacked messages across all members of the group (1 to 100,000); ``None``
                removes the limit.
            rate: messages per second delivered to the group (> 0); ``None`` removes the limit.
            filter: only messages matching it are delivered, e.g. ``'headers.type = "order"'``
                (docs/consuming.md, "Filters"); ``None`` removes it. A changed filter applies from the
                offsets in the answer's ``filter_applies_from``.
            push: ``Push(url=, max_concurrency=, rate=, timeout=, ordered=, mode=)`` or a dict of those
                fields: POST every message to ``url`` (the answer of the update that first sets it holds
                the signing secret, once); ``None`` turns push off.

        Raises:
            BadRequestError: a value is out of range, or the filter does not parse (``details`` give the
                position and what was expected).
            NotFoundError: no such topic.
        """
        options = _update_options(
            topic,
            group,
            ack_timeout,
            session_timeout,
            dead_letter,
            push,
            max_in_flight=max_in_flight,
            rate=rate,
            filter=filter,
        )
        return parse_model(ConsumerGroup, self._client.request(options))

    def delete(self, topic: str, group: str) -> None:
        """Delete a group with its offsets.

        Raises:
            ConflictError: members are connected (``GROUP_ACTIVE``).
            NotFoundError: no such topic or group.
        """
        self._client.request(RequestOptions("DELETE", _path(topic, group)))

    def reset_offsets(self, topic: str, group: str, *, to: ResetTo) -> builtins.list[PartitionPosition]:
        """Move every partition of a stopped group to ``"earliest"``, ``"latest"`` or an offset (clamped to
        what is retained).

        Raises:
            ConflictError: members are connected (``GROUP_ACTIVE``).
            NotFoundError: no such topic or group.
        """
        return parse_list(PartitionPosition, self._client.request(_reset_options(topic, group, to)))

    def rotate_push_secret(self, topic: str, group: str) -> PushSecret:
        """A new signing secret for a push group, answered once; the previous one keeps signing beside it
        for 24 h (verify with either: ``queuecore.webhooks.verify(body, headers, [new, old])``).

        Raises:
            BadRequestError: the group is not a push group.
            NotFoundError: no such topic or group.
        """
        return parse_model(PushSecret, self._client.request(_push_options(topic, group, "rotate-secret")))

    def push_attempts(
        self, topic: str, group: str, *, limit: int | None = None
    ) -> builtins.list[PushAttempt]:
        """A push group's most recent POSTs, newest first (``limit`` 1 to 1000, default 50).

        Raises:
            BadRequestError: the group is not a push group.
            NotFoundError: no such topic or group.
        """
        return parse_list(PushAttempt, self._client.request(_push_options(topic, group, "attempts", limit)))

    def pause(self, topic: str, group: str, *, until: datetime | int | str | None = None) -> GroupPause:
        """Pause the group: no member receives messages (within a second, on every server) until
        ``until`` (an aware ``datetime``, ISO-8601 or epoch milliseconds) or ``resume``; acks, nacks and
        extends still work.

        Raises:
            BadRequestError: ``until`` is malformed or not in the future.
            NotFoundError: no such topic or group.
        """
        return parse_model(GroupPause, self._client.request(_pause_options(topic, group, until)))

    def resume(self, topic: str, group: str) -> GroupPause:
        """End the group's pause (a user's or the DLQ breaker's).

        Raises:
            NotFoundError: no such topic or group.
        """
        response = self._client.request(RequestOptions("POST", f"{_path(topic, group)}/resume"))
        return parse_model(GroupPause, response)


class AsyncConsumerGroups(AsyncAPIResource):
    """Consumer groups of a topic."""

    async def list(self, topic: str) -> list[ConsumerGroupSummary]:
        """The topic's groups. See ``ConsumerGroups.list``."""
        response = await self._client.request(RequestOptions("GET", _path(topic)))
        return parse_list(ConsumerGroupSummary, response)

    async def describe(self, topic: str, group: str) -> ConsumerGroup:
        """A group with partitions and config. See ``ConsumerGroups.describe``."""
        response = await self._client.request(RequestOptions("GET", _path(topic, group)))
        return parse_model(ConsumerGroup, response)

    async def update(
        self,
        topic: str,
        group: str,
        *,
        ack_timeout: str | None = None,
        session_timeout: str | None = None,
        dead_letter: DeadLetterParam = _UNSET,
        max_in_flight: int | None = _UNSET,
        rate: float | None = _UNSET,
        filter: str | None = _UNSET,
        push: PushParam = _UNSET,
    ) -> ConsumerGroup:
        """Create the group or merge settings into its config. See ``ConsumerGroups.update``."""
        options = _update_options(
            topic,
            group,
            ack_timeout,
            session_timeout,
            dead_letter,
            push,
            max_in_flight=max_in_flight,
            rate=rate,
            filter=filter,
        )
        return parse_model(ConsumerGroup, await self._client.request(options))

    async def delete(self, topic: str, group: str) -> None:
        """Delete a group with its offsets. See ``ConsumerGroups.delete``."""
        await self._client.request(RequestOptions("DELETE", _path(topic, group)))

    async def reset_offsets(self, topic: str, group: str, *, to: ResetTo) -> builtins.list[PartitionPosition]:
        """Move every partition of a stopped group. See ``ConsumerGroups.reset_offsets``."""
        response = await self._client.request(_reset_options(topic, group, to))
        return parse_list(PartitionPosition, response)

    async def rotate_push_secret(self, topic: str, group: str) -> PushSecret:
        """A new signing secret for a push group. See ``ConsumerGroups.rotate_push_secret``."""
        response = await self._client.request(_push_options(topic, group, "rotate-secret"))
        return parse_model(PushSecret, response)

    async def push_attempts(
        self, topic: str, group: str, *, limit: int | None = None
    ) -> builtins.list[PushAttempt]:
        """A push group's most recent POSTs. See ``ConsumerGroups.push_attempts``."""
        response = await self._client.request(_push_options(topic, group, "attempts", limit))
        return parse_list(PushAttempt, response)

    async def pause(self, topic: str, group: str, *, until: datetime | int | str | None = None) -> GroupPause:
        """Pause the group. See ``ConsumerGroups.pause``."""
        return parse_model(GroupPause, await self._client.request(_pause_options(topic, group, until)))

    async def resume(self, topic: str, group: str) -> GroupPause:
        """End the group's pause. See ``ConsumerGroups.resume``."""
        response = await self._client.request(RequestOptions("POST", f"{_path(topic, group)}/resume"))
        return parse_model(GroupPause, response)
