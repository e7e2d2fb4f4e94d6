"""Read timeouts on the web process itself: a client must send its request at a useful pace.

uvicorn (0.55) times only the idle gap *between* requests (``timeout_keep_alive``). A
connection that opens and sends nothing, half a request head, or a body one byte a minute is
kept forever: each costs a descriptor and a protocol object, and 1,100 of them under a
1,024-descriptor limit stopped the process accepting anyone for 25 s. Behind nginx its
``client_header_timeout`` / ``client_body_timeout`` do this; ``make run`` and any deployment
that exposes uvicorn directly had nothing. :class:`TimedHttpToolsProtocol` (uvicorn's httptools
protocol, which ``config.server`` serves with) adds, per connection:

- **head**: the request line and headers must be complete ``header_timeout_s`` after the
  connection opened, or after the first byte of the next request on a kept-alive connection,
  and hold at most :data:`MAX_HEAD_BYTES` (llhttp itself has no cap: a client could stream
  headers into memory until the timeout) — else the connection is closed (431 for the size);
- **body**: in every ``body_timeout_s`` window the body must advance by at least one byte and
  by ``body_min_rate`` bytes per second on average, else the connection is closed and the app
  sees ``http.disconnect``. A window in which the server is not reading (uvicorn paused reading
  because the app has not taken 64 KiB it already has; a ``100-continue`` the app has not
  asked for yet) is not held against the client.

Only *reading the request* is timed: once the body is complete the phase is idle, so a response
— a stream of server-sent events for half an hour — is never cut by these timers, and nothing
is armed per response chunk.

Cost on the hot path: no timer per request. One ``call_at`` per connection, armed when a
request begins if none is pending; when it fires it checks the phase (idle: it lapses; head or
body in progress: it re-arms for that phase's own deadline). Per request that leaves a few
attribute writes, two ``loop.time()`` calls and one Python frame per parser callback.
Microbenchmark (uvloop; one protocol instance with a stub transport and an ASGI app that
answers at once; 4,000 keep-alive requests fed through ``data_received`` one after another,
best of 7 runs, this shared 2-core VM): a ``GET`` with four headers 14.7 µs per request with
uvicorn's ``HttpToolsProtocol``, 14.8–15.9 µs with this one; a ``POST`` with a 20-byte body
14.5–14.6 µs against 15.2–15.8 µs. About 0.5–1 µs a request, the same order as the
run-to-run noise, against the several hundred µs of CPU a ``/v1`` call costs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

# Largest request head (request line and headers) accepted, in bytes: nginx's default
# ``large_client_header_buffers 4 16k`` allows the same.
MAX_HEAD_BYTES = 64 * 1024

_IDLE, _HEAD, _BODY = 0, 1, 2
# The parser callbacks call the base class's methods directly: ``super()`` costs ~0.1 µs a call.
_base = HttpToolsProtocol

_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 32\r\nconnection: close\r\n\r\nRequest header fields too large."
)


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with request-read timeouts (module docstring). The limits
    are class attributes: :func:`timed_protocol` makes a subclass with configured ones."""

    header_timeout_s: ClassVar[float] = 10.0
    body_timeout_s: ClassVar[float] = 30.0
    body_min_rate: ClassVar[float] = 500.0  # bytes per second, averaged over each window

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._since = 0.0  # when the head began, or the body's current window
        self._head_bytes = 0  # bytes fed while the head was still incomplete
        self._body_bytes = 0  # body bytes received so far
        self._window_mark = 0  # _body_bytes when the current window began
        self._read_timer: asyncio.TimerHandle | None = None

    # --- the phases -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._begin_head()

    def _begin_head(self) -> None:
        self._phase = _HEAD
        self._since = self.loop.time()
        self._head_bytes = 0
        if self._read_timer is None:
            self._read_timer = self.loop.call_at(self._since + self.header_timeout_s, self._check)

    def data_received(self, data: bytes) -> None:
        _base.data_received(self, data)
        if self._phase == _HEAD:  # the head is still incomplete after this chunk
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.transport.write(_TOO_LARGE)
                self.transport.close()

    def on_message_begin(self) -> None:
        _base.on_message_begin(self)
        if self._phase != _HEAD:  # a connection's first request keeps connection_made's start
            self._begin_head()

    def on_headers_complete(self) -> None:
        _base.on_headers_complete(self)
        self._phase = _BODY
        self._since = self.loop.time()
        self._body_bytes = self._window_mark = 0

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        _base.on_body(self, body)

    def on_message_complete(self) -> None:
        self._phase = _IDLE
        _base.on_message_complete(self)

    def handle_websocket_upgrade(self) -> None:
        self._phase = _IDLE  # the websocket protocol takes the connection over
        self._cancel_read_timer()
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _IDLE
        self._cancel_read_timer()
        super().connection_lost(exc)

    # --- the timer --------------------------------------------------------------------------
    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _check(self) -> None:
        """The timer fired: close a connection whose head or body is overdue, re-arm for the
        phase in progress, or lapse when nothing is being read."""
        self._read_timer = None
        if self._phase == _IDLE or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._phase == _HEAD:
            deadline = self._since + self.header_timeout_s
            if now >= deadline:
                self._time_out("its request head")
                return
        else:
            deadline = self._since + self.body_timeout_s
            if now >= deadline:
                received = self._body_bytes - self._window_mark
                if not self._server_is_holding_the_body() and (
                    received == 0 or received < self.body_min_rate * (now - self._since)
                ):
                    self._time_out("its request body")
                    return
                self._since, self._window_mark = now, self._body_bytes
                deadline = now + self.body_timeout_s
        self._read_timer = self.loop.call_at(deadline, self._check)

    def _server_is_holding_the_body(self) -> bool:
        """Whether the body's lack of progress is the server's doing: reading is paused, or the
        client waits for a ``100 Continue`` the app has not asked for yet."""
        cycle = self.cycle
        waiting_for_continue = (
            cycle is not None and cycle.waiting_for_100_continue and not cycle.response_complete
        )
        return self.flow.read_paused or waiting_for_continue

    def _time_out(self, what: str) -> None:
        log.debug("closing a connection from %s: %s is overdue", self.client, what)
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # a client that does not read what we wrote either
        else:
            self.transport.close()


def timed_protocol(
    *, header_timeout_s: float, body_timeout_s: float, body_min_rate: float
) -> type[TimedHttpToolsProtocol]:
    """:class:`TimedHttpToolsProtocol` with these limits, for ``uvicorn.Config(http=…)``."""
    return type(
        "TimedHttpToolsProtocol",
        (TimedHttpToolsProtocol,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "body_min_rate": body_min_rate,
        },
    )
