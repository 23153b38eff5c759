"""``client.alerts``: the project's alert webhook (DLQ depth alerts): set, get, delete, test, deliveries."""

from __future__ import annotations

from typing import Any

from .._base_client import RequestOptions, parse_model
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.alert import AlertDeliveryPage, AlertEndpoint, AlertTestEvent

__all__ = ["Alerts", "AsyncAlerts"]

_ENDPOINT = "/v1/alerts/endpoint"


def _set_options(url: str, secret: str | None) -> RequestOptions:
    body: dict[str, Any] = {"url": url}
    if secret is not None:
        body["secret"] = secret
    return RequestOptions("PUT", _ENDPOINT, json=body)


def _deliveries_options(limit: int | None, cursor: str | None) -> RequestOptions:
    return RequestOptions("GET", "/v1/alerts/deliveries", params={"limit": limit, "cursor": cursor})


class Alerts(SyncAPIResource):
    """The project's alert webhook."""

    def set(self, *, url: str, secret: str | None = None) -> AlertEndpoint:
        """Set the endpoint. Without ``secret`` on creation one is generated and returned once, as
        ``secret``; an update without it keeps the current one.

        Raises:
            BadRequestError: not an http(s) URL, or (production) an internal address.
        """
        return parse_model(AlertEndpoint, self._client.request(_set_options(url, secret)))

    def get(self) -> AlertEndpoint:
        """The endpoint and its breaker state (never the secret). ``NotFoundError`` when none is set."""
        return parse_model(AlertEndpoint, self._client.request(RequestOptions("GET", _ENDPOINT)))

    def delete(self) -> None:
        """Remove the endpoint; alerts not delivered yet are given up."""
        self._client.request(RequestOptions("DELETE", _ENDPOINT))

    def send_test_event(self) -> AlertTestEvent:
        """Queue a signed ``test`` event for the endpoint."""
        return parse_model(AlertTestEvent, self._client.request(RequestOptions("POST", f"{_ENDPOINT}/test")))

    def deliveries(self, *, limit: int | None = None, cursor: str | None = None) -> AlertDeliveryPage:
        """Every delivery attempt, newest first."""
        return parse_model(AlertDeliveryPage, self._client.request(_deliveries_options(limit, cursor)))


class AsyncAlerts(AsyncAPIResource):
    """The project's alert webhook."""

    async def set(self, *, url: str, secret: str | None = None) -> AlertEndpoint:
        """Set the endpoint. See ``Alerts.set``."""
        return parse_model(AlertEndpoint, await self._client.request(_set_options(url, secret)))

    async def get(self) -> AlertEndpoint:
        """The endpoint and its breaker state."""
        return parse_model(AlertEndpoint, await self._client.request(RequestOptions("GET", _ENDPOINT)))

    async def delete(self) -> None:
        """Remove the endpoint."""
        await self._client.request(RequestOptions("DELETE", _ENDPOINT))

    async def send_test_event(self) -> AlertTestEvent:
        """Queue a signed ``test`` event for the endpoint."""
        response = await self._client.request(RequestOptions("POST", f"{_ENDPOINT}/test"))
        return parse_model(AlertTestEvent, response)

    async def deliveries(self, *, limit: int | None = None, cursor: str | None = None) -> AlertDeliveryPage:
        """Every delivery attempt, newest first."""
        return parse_model(AlertDeliveryPage, await self._client.request(_deliveries_options(limit, cursor)))
