"""Real ASGI servers for end-to-end tests, each running the app in a background thread.

:func:`uvicorn_server` is the production server (``config.server``: uvicorn with uvloop and
httptools, and the drain on shutdown); :func:`daphne_server` keeps the development server
(Channels' ``runserver``) covered by a smoke test. Either server shares the test process's
settings, database (tests must use ``transactional_db`` so their rows are committed and
visible to the server's connections) and cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import quote

import httpx
from django.conf import settings

from config.services import free_port, pid_alive  # noqa: F401  (the tests' helpers too)
from inference.floor import Floor

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
# The floors (the calls each carries) of the servers running in this process, by base URL.
_FLOORS: dict[str, Floor[Any]] = {}


def floor_of(url: str) -> Floor[Any]:
    """The :class:`~inference.floor.Floor` of the in-process server at ``url`` (a base URL,
    with or without ``/v1``)."""
    return _FLOORS[url.removesuffix("/v1")]


def live_floors() -> list[Floor[Any]]:
    """The floors of every server running in this process."""
    return list(_FLOORS.values())


def wait_http(url: str, *, seconds: float = 30.0) -> None:
    """Poll ``url`` until it answers (any status) or raise after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def wait_for(check: Callable[[], T], *, seconds: float = 30.0) -> T:
    """Poll ``check`` every 50 ms until it returns something true, and return that; the test
    fails when ``seconds`` pass first (work the server finishes after answering, a subprocess)."""
    deadline = time.monotonic() + seconds
    while not (result := check()):
        assert time.monotonic() < deadline, f"not reached within {seconds} s"
        time.sleep(0.05)
    return result


def shared_database_url() -> str:
    """The URL of the database this test run uses, for a second process that must share it."""
    db = settings.DATABASES["default"]
    auth = quote(db.get("USER") or "postgres")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


def server_process(
    *, output: IO[bytes] | None = None, **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """The production server (``config.server``, test settings) in a process of its own on a
    free port and the test database, ``env`` added to this process's environment, its output
    to ``output`` (default: this process's); returns the process and its base URL once
    ``/healthz`` answers. The caller stops the process."""
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": shared_database_url(),
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "config.server", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/healthz", seconds=60)
    except BaseException:
        proc.kill()
        raise
    return proc, url


@contextmanager
def _served(
    run: Callable[[], None], *, name: str, port: int, stop: Callable[[], None], join_s: float
) -> Iterator[str]:
    """Run ``run`` in a daemon thread, yield the base URL once ``/healthz`` answers; on exit call
    ``stop`` and wait up to ``join_s`` for the thread."""
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz")
    try:
        yield url
    finally:
        stop()
        thread.join(timeout=join_s)


@contextmanager
def uvicorn_server() -> Iterator[str]:
    """Serve the app with the production server (``config.server``) on a free port."""
    from config.server import build

    port = free_port()
    server = build("127.0.0.1", port)

    def stop() -> None:
        server.should_exit = True

    with _served(server.run, name="uvicorn", port=port, stop=stop, join_s=30) as url:
        _FLOORS[url] = server.floor
        try:
            yield url
        finally:
            _FLOORS.pop(url, None)


@contextmanager
def daphne_server() -> Iterator[str]:
    """Serve ``config.asgi:application`` with daphne on a free port; yields the base URL."""
    from daphne.server import Server  # imported late: it installs the asyncio reactor

    from config.asgi import application

    port = free_port()
    server = Server(
        application,
        endpoints=[f"tcp:port={port}:interface=127.0.0.1"],
        signal_handlers=False,
        verbosity=0,
    )

    def stop() -> None:
        from twisted.internet import reactor

        reactor.callFromThread(reactor.stop)  # type: ignore[attr-defined]

    with _served(server.run, name="daphne", port=port, stop=stop, join_s=10) as url:
        yield url
