"""``client.alerts`` against a real server, async: set, get, test event, deliveries, delete."""

from __future__ import annotations

import pytest

import queuecore

pytestmark = pytest.mark.integration


async def test_the_async_resource(server):
    key = server.keys["sdk-docs"]["production"]
    async with queuecore.AsyncQueueCore(api_key=key, base_url=server.url) as client:
        endpoint = await client.alerts.set(url="https://hooks.example.com/qc", secret="s" * 20)
        assert isinstance(endpoint, queuecore.AlertEndpoint) and endpoint.secret is None
        assert endpoint.secret_hint == "ssss" and endpoint.state == "closed"
        assert (await client.alerts.get()).url == "https://hooks.example.com/qc"
        event = await client.alerts.send_test_event()
        assert event.event_id.startswith("evt_")
        page = await client.alerts.deliveries(limit=5)
        assert isinstance(page, queuecore.AlertDeliveryPage)
        await client.alerts.delete()
        with pytest.raises(queuecore.NotFoundError) as gone:
            await client.alerts.get()
        assert gone.value.code == "ALERT_ENDPOINT_NOT_FOUND"
        with pytest.raises(queuecore.BadRequestError):
            await client.alerts.set(url="ftp://example.com")
