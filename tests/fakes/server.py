"""The lifecycle the fake servers share: an aiohttp app on 127.0.0.1 (or another address of this
machine), in its own thread and loop.

A subclass calls :meth:`ThreadedServer.serve_on_free_port` from its ``__post_init__`` and lists
its routes in :meth:`ThreadedServer.routes`; :meth:`start` returns once the port accepts
connections and :meth:`stop` closes the server and ends the thread (or ``with server:``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web

from tests.live import free_port


class ThreadedServer:
    """An aiohttp application served from a daemon thread; ``url`` is its ``/v1`` base."""

    host: str
    port: int
    url: str

    def serve_on_free_port(self, thread_name: str, host: str = "127.0.0.1") -> None:
        """Pick a free port and prepare (not start) the thread that will serve on it, on
        ``host`` (an address other network namespaces reach, for ``tests.hosts``)."""
        self.host = host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}/v1"
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def routes(self, router: web.UrlDispatcher) -> None:
        """Add the server's routes to ``router`` (called once, in the server's thread)."""
        raise NotImplementedError

    def start(self) -> Self:
        """Start serving; raises ``RuntimeError`` when the port is not listening within 10 s."""
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError(f"{self._thread.name} did not start")
        return self

    def stop(self) -> None:
        """Close the server (open connections included) and end its thread."""
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> Self:
        """``with Server(...) as server``: started on entry, stopped on exit."""
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes(app.router)
        runner = self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, self.host, self.port).start())
        self._started.set()
        self._loop.run_forever()
