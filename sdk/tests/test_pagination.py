"""Cursor pages: lazy, complete, both clients."""

from __future__ import annotations

import httpx
import pytest
from sdk_support import json_response

import queuecore


def topic(name: str) -> dict[str, object]:
    return {
        "id": f"top_{name}",
        "name": name,
        "partitions": 1,
        "retention": "7d",
        "delivery": "exactly-once",
        "status": "active",
        "createdAt": "2026-03-28T10:42:18.003Z",
    }


PAGES = {
    None: {"data": [topic("a"), topic("b")], "nextCursor": "c1"},
    "c1": {"data": [topic("c"), topic("d")], "nextCursor": "c2"},
    "c2": {"data": [topic("e")], "nextCursor": None},
}


def pages(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/v1/topics"
    return json_response(200, PAGES[request.url.params.get("cursor")])


class TestSync:
    def test_iterates_every_page_lazily(self, mock_client, recorder):
        client = mock_client(pages)
        listing = client.topics.list()
        assert len(recorder.requests) == 1
        it = iter(listing)
        assert [next(it).name, next(it).name] == ["a", "b"]
        assert len(recorder.requests) == 1
        assert next(it).name == "c"
        assert len(recorder.requests) == 2
        assert [t.name for t in it] == ["d", "e"]
        assert len(recorder.requests) == 3

    def test_pages_by_hand(self, mock_client, recorder):
        client = mock_client(pages)
        page = client.topics.list(limit=2)
        assert recorder.requests[0].url.params["limit"] == "2"
        assert [t.name for t in page.data] == ["a", "b"]
        assert page.next_cursor == "c1" and page.has_next_page()
        second = page.get_next_page()
        assert recorder.requests[1].url.params["cursor"] == "c1"
        assert recorder.requests[1].url.params["limit"] == "2"
        assert [t.name for t in second.data] == ["c", "d"]
        assert [len(p.data) for p in page.iter_pages()] == [2, 2, 1]

    def test_last_page(self, mock_client):
        client = mock_client(pages)
        last = client.topics.list(cursor="c2")
        assert not last.has_next_page()
        with pytest.raises(RuntimeError):
            last.get_next_page()
        assert [t.name for t in last] == ["e"]

    def test_empty(self, mock_client):
        client = mock_client(lambda request: json_response(200, {"data": [], "nextCursor": None}))
        assert list(client.topics.list()) == []

    def test_items_carry_the_request_id(self, mock_client):
        client = mock_client(pages)
        assert next(iter(client.topics.list())).request_id == "req_test"


class TestAsync:
    async def test_async_for_walks_every_page(self, mock_async_client, recorder):
        client = mock_async_client(pages)
        listing = client.topics.list()
        assert recorder.requests == []  # nothing is fetched until iterated or awaited
        assert [t.name async for t in listing] == ["a", "b", "c", "d", "e"]
        assert len(recorder.requests) == 3

    async def test_await_is_the_first_page(self, mock_async_client, recorder):
        client = mock_async_client(pages)
        page = await client.topics.list(limit=2)
        assert isinstance(page, queuecore.AsyncCursorPage)
        assert [t.name for t in page.data] == ["a", "b"]
        assert len(recorder.requests) == 1
        second = await page.get_next_page()
        assert [t.name for t in second.data] == ["c", "d"]
        assert [len(p.data) async for p in page.iter_pages()] == [2, 2, 1]
        assert [t.name async for t in second] == ["c", "d", "e"]
