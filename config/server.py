"""The production web process: uvicorn serving :mod:`config.asgi`, draining calls on SIGTERM.

``python -m config.server --host 127.0.0.1 --port 8000``

Why uvicorn (see ``docs/security.md``): it hands the request body to the app as it arrives, so
the app refuses an oversized body on its declared length and counts bytes of a chunked one;
daphne (through Twisted) buffers and parses the whole body before the app runs.

Slow clients (see ``docs/security.md``): the request head must arrive within
``INFRAI_HEADER_TIMEOUT_S`` and the body keep a minimum pace (``INFRAI_BODY_TIMEOUT_S``,
``INFRAI_BODY_MIN_RATE_BPS``), else the connection is closed (:mod:`config.timeouts`); only
reading the request is timed, never a response. The process also raises its own open-files
limit to the hard limit, so that the connections a timeout has not closed yet do not exhaust
the default 1,024 descriptors.

Shutdown (SIGTERM or Ctrl-C): the listening sockets close first; then
:func:`inference.settlement.drain` lets the calls in flight finish for ``INFRAI_DRAIN_S``
seconds, ends the rest (a stream gets an error event and ``[DONE]``, a non-streamed call a 503)
and bills what each delivered; only then does uvicorn close connections and stop.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import resource
import socket
from typing import Any

import uvicorn


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the platform's drain between "stop accepting" and "close".

    It owns the :class:`~inference.floor.Floor` of the calls it carries: every request
    finds it in its scope's ``state``; the drain and the exit hook bill from it."""

    def __init__(self, config: uvicorn.Config) -> None:
        import atexit

        from inference.floor import Floor
        from inference.settlement import settle_now

        super().__init__(config)
        self.floor: Floor[Any] = Floor()
        # A process that stops without the drain still bills the streams it relays.
        atexit.register(settle_now, self.floor)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        from inference.http import FLOOR_KEY

        self.lifespan.state[FLOOR_KEY] = self.floor  # copied into every request's scope
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        from django.conf import settings

        from inference.settlement import close_clients, drain

        for server in self.servers:
            server.close()
        if not self.force_exit:
            await drain(self.floor, grace_s=float(settings.INFRAI_DRAIN_S))
        await super().shutdown(sockets=sockets)
        await close_clients()


# Young objects counted before the collector runs (CPython's default is 700). A call allocates
# and frees thousands; at 700 the youngest generation is collected every ~30 calls.
GC_YOUNG_THRESHOLD = 7_000


def settle_the_heap() -> None:
    """Move everything loaded so far (Django, the app, the catalog, tokenizers: several
    hundred thousand objects that live as long as the process) out of the cyclic garbage
    collector's sight (:func:`gc.freeze`), and collect the youngest generation less often.

    Without it, each full collection walks all of them: a pause of ~80–100 ms on the event loop
    (measured on the benchmark machine, about once per 5,000 calls), which every call in flight
    waits out. Frozen, the same collection takes ~2.5 ms. Garbage cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def build(host: str, port: int, *, log_level: str = "warning") -> DrainingServer:
    """The configured server (the app is imported here, after ``DJANGO_SETTINGS_MODULE``)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.conf import settings

    from config.asgi import application
    from config.timeouts import timed_protocol
    from inference import tokens

    tokens.load()  # not in the first call's latency

    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="off",
        proxy_headers=True,
        server_header=False,
        timeout_graceful_shutdown=5,
        # uvloop when installed, as "auto" picks; httptools (in uvicorn[standard], a dependency)
        # always: the read timeouts are a subclass of its protocol. No access log: a log record
        # per call on the event loop, and every /v1 call already has its request-log row.
        loop="uvloop" if _installed("uvloop") else "asyncio",
        http=timed_protocol(
            header_timeout_s=settings.INFRAI_HEADER_TIMEOUT_S,
            body_timeout_s=settings.INFRAI_BODY_TIMEOUT_S,
            body_min_rate=settings.INFRAI_BODY_MIN_RATE_BPS,
        ),
        access_log=False,
    )
    return DrainingServer(config)


def raise_open_files_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (a systemd unit's is
    524,288; a login shell's soft limit is often 1,024); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):  # a platform that refuses: keep what we have
            pass
    return soft


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    raise_open_files_limit()
    server = build(args.host, args.port, log_level=args.log_level)
    settle_the_heap()  # the process's own heap only: tests that build() in-process keep theirs
    server.run()


if __name__ == "__main__":
    main()
