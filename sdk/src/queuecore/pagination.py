"""Cursor pages: ``{data: [...], nextCursor}`` answers, fetched one page at a time as you iterate.

Sync::

    for topic in client.topics.list():          # every topic, fetching pages as needed
        ...
    page = client.topics.list(limit=10)         # or page by page
    page.data, page.next_cursor, page.has_next_page(), page.get_next_page()

Async::

    async for topic in client.topics.list():    # every topic
        ...
    page = await client.topics.list(limit=10)   # the first page
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Generator, Iterator
from typing import Any, Callable, Generic, TypeVar

__all__ = ["AsyncCursorPage", "AsyncPaginator", "SyncCursorPage"]

_T = TypeVar("_T")


class SyncCursorPage(Generic[_T]):
    """One page of a list. Iterating it yields every item of this page and of all the pages after it."""

    data: list[_T]
    """The items of this page."""
    next_cursor: str | None
    """The cursor of the next page; ``None`` on the last one."""

    def __init__(
        self, data: list[_T], next_cursor: str | None, fetch: Callable[[str], SyncCursorPage[_T]]
    ) -> None:
        self.data = data
        self.next_cursor = next_cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        """Whether another page follows this one."""
        return self.next_cursor is not None

    def get_next_page(self) -> SyncCursorPage[_T]:
        """Fetch the page after this one."""
        if self.next_cursor is None:
            raise RuntimeError("This is the last page; check has_next_page() first.")
        return self._fetch(self.next_cursor)

    def iter_pages(self) -> Iterator[SyncCursorPage[_T]]:
        """This page and every page after it, each fetched when reached."""
        page: SyncCursorPage[_T] = self
        while True:
            yield page
            if not page.has_next_page():
                return
            page = page.get_next_page()

    def __iter__(self) -> Iterator[_T]:
        for page in self.iter_pages():
            yield from page.data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(data={self.data!r}, next_cursor={self.next_cursor!r})"


class AsyncCursorPage(Generic[_T]):
    """One page of a list. ``async for`` over it yields every item of this page and all pages after it."""

    data: list[_T]
    next_cursor: str | None

    def __init__(
        self,
        data: list[_T],
        next_cursor: str | None,
        fetch: Callable[[str], Awaitable[AsyncCursorPage[_T]]],
    ) -> None:
        self.data = data
        self.next_cursor = next_cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        """Whether another page follows this one."""
        return self.next_cursor is not None

    async def get_next_page(self) -> AsyncCursorPage[_T]:
        """Fetch the page after this one."""
        if self.next_cursor is None:
            raise RuntimeError("This is the last page; check has_next_page() first.")
        return await self._fetch(self.next_cursor)

    async def iter_pages(self) -> AsyncIterator[AsyncCursorPage[_T]]:
        """This page and every page after it, each fetched when reached."""
        page: AsyncCursorPage[_T] = self
        while True:
            yield page
            if not page.has_next_page():
                return
            page = await page.get_next_page()

    async def __aiter__(self) -> AsyncIterator[_T]:
        async for page in self.iter_pages():
            for item in page.data:
                yield item

    def __repr__(self) -> str:
        return f"{type(self).__name__}(data={self.data!r}, next_cursor={self.next_cursor!r})"


class AsyncPaginator(Generic[_T]):
    """What an async ``list()`` returns before anything is fetched.

    ``async for item in paginator`` walks every item of every page, fetching lazily;
    ``await paginator`` fetches the first page only (an ``AsyncCursorPage``).
    """

    def __init__(self, first: Callable[[], Awaitable[AsyncCursorPage[_T]]]) -> None:
        self._first = first

    def __await__(self) -> Generator[Any, None, AsyncCursorPage[_T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[_T]:
        page = await self._first()
        async for item in page:
            yield item
