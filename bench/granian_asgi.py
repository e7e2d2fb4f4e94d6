"""``config.asgi`` set up for Granian as ``config.server`` sets it up for uvicorn: measured by
``bench/servers.py``, never served in production.

    PYTHONPATH=/tmp/granian-pkgs .venv/bin/python -m granian --interface asgi --loop uvloop \\
        --workers 1 --log-level warning bench.granian_asgi:application

Granian (a Rust HTTP server, ``pip install --target /tmp/granian-pkgs --no-deps granian``: a
bench-only install) runs the app in a worker process it spawns. On import, in that worker, this
module does what :func:`config.server.build` and :func:`config.server.main` do before uvicorn
serves: it loads the tokenizer tables and freezes the loaded heap
(:func:`config.server.settle_the_heap`), so that CPU per call is compared with the same
collector settings. The ASGI lifespan (which Granian runs and uvicorn's production entry turns
off) stands in for :class:`config.server.DrainingServer`: at startup it puts one
:class:`~inference.floor.Floor` into the lifespan ``state`` that Granian copies into every
request's scope; at shutdown it closes the vendor sessions and the database pool.

The drain on SIGTERM: Granian's worker answers SIGTERM and SIGINT alike by a graceful stop that
waits for every open connection (a stream may last half an hour) and only then runs the
lifespan's shutdown, so a drain there would come too late. Here the worker's SIGTERM handler is
replaced at startup by one that drains the floor first (new calls refused with 503, calls in
flight given ``INFRAI_DRAIN_S``, then ended and billed) and then sends the worker the SIGINT that
starts Granian's own graceful stop. Unlike uvicorn, Granian keeps accepting connections during
the drain (they are refused with 503 ``server_shutting_down``, which the SDKs retry).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

from django.conf import settings

from config.asgi import application as _served
from config.server import settle_the_heap
from inference import tokens
from inference.floor import Floor
from inference.http import FLOOR_KEY
from inference.settlement import close_clients, drain, settle_now

tokens.load()  # not in the first call's latency, as config.server.build does


async def _drain_then_stop(floor: Floor[Any]) -> None:
    try:
        await drain(floor, grace_s=float(settings.INFRAI_DRAIN_S))
    finally:
        os.kill(os.getpid(), signal.SIGINT)  # Granian's graceful stop (its handler for both)


async def _lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    floor: Floor[Any] = Floor()
    atexit.register(settle_now, floor)  # streams still open at exit are billed, as uvicorn's
    scope["state"][FLOOR_KEY] = floor  # Granian copies the lifespan state into each scope
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task[None]] = []

    def on_sigterm() -> None:
        if not draining:
            draining.append(loop.create_task(_drain_then_stop(floor)))

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            settle_the_heap()
            # In place of Granian's own handler (module docstring).
            loop.add_signal_handler(signal.SIGTERM, on_sigterm)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if not draining:  # stopped by SIGINT (Ctrl-C): drain what is left now
                await drain(floor, grace_s=0.0)
            await close_clients()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``config.asgi.application`` with the lifespan above (Channels' router has none)."""
    if scope["type"] == "lifespan":
        await _lifespan(scope, receive, send)
    else:
        await _served(scope, receive, send)
