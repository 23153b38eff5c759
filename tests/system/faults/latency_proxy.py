"""A TCP proxy that makes a server slow: every chunk read from either side is forwarded ``delay`` seconds
after it arrived, in order (a latency, not a bandwidth cap: an overloaded or swapping Redis, a congested
link). Real sockets, asyncio, in the test's own process; ``delay`` can be changed at run time and applies
to chunks read from then on.

    proxy = LatencyProxy("127.0.0.1", redis.port); await proxy.start()   # clients use proxy.port
    proxy.delay = 1.0; …; proxy.delay = 0.0; await proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class LatencyProxy:
    """Forwards connections to ``host:port``, each chunk held ``delay`` seconds in each direction."""

    def __init__(self, host: str, port: int, *, listen_port: int = 0) -> None:
        self.host = host
        self.upstream_port = port
        self.delay = 0.0
        # Chunks forwarded towards the upstream server so far: whether a client asked it anything.
        self.requests = 0
        self._listen_port = listen_port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._listen_port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            client_w.close()
            return
        self._spawn(self._pipe(client_r, upstream_w, upstream=True))
        self._spawn(self._pipe(upstream_r, client_w))

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        """Read chunks as they come; a second task writes each one at its arrival time plus the delay."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        sender = loop.create_task(send())
        try:
            while True:
                chunk = await reader.read(65536)
                if upstream and chunk:
                    self.requests += 1
                queue.put_nowait((loop.time() + self.delay, chunk))
                if not chunk:
                    break
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await sender
            writer.close()


class ProxyThread:
    """A ``LatencyProxy`` on an event loop of its own, in a daemon thread: it keeps forwarding whatever the
    caller's loop is doing (or when the caller has none, as bench/faults.py between runs). ``delay`` may be
    set from any thread; it applies to chunks read from then on."""

    def __init__(self, host: str, port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-proxy", daemon=True)
        self._thread.start()
        self._proxy = LatencyProxy(host, port)
        asyncio.run_coroutine_threadsafe(self._proxy.start(), self._loop).result(10)

    @property
    def port(self) -> int:
        return self._proxy.port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def delay(self) -> float:
        return self._proxy.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._loop.call_soon_threadsafe(setattr, self._proxy, "delay", seconds)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._proxy.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
