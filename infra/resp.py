"""A lean Redis client for the ``/v1`` hot path: one pipelined connection per event loop.

redis-py's asyncio client costs 100–300 µs of CPU per round trip (a pool checkout guarded by
a condition, command objects, a retry wrapper, a response callback per command) — more than
the rest of a rate-limit check. Here a round trip is: pack the commands into one RESP buffer,
write it, and match the replies in order as hiredis (redis-py's own optional C parser) parses
them. Every task of the loop shares the one connection, as Redis answers a connection's
commands in the order it received them; many small calls in flight pipeline naturally.

Failure semantics: a connection that breaks or stays silent past ``timeout_s`` fails every
command waiting on it with :class:`ConnectionError` and is replaced on the next call; an error
reply raises :class:`ReplyError`. A caller cancelled while waiting loses its reply, never
another caller's. Supports ``redis://`` and ``rediss://`` (TLS) URLs with user, password and
database number, and ``unix://`` sockets (``?db=N``).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

Command = Sequence[str | int | bytes]


class ReplyError(Exception):
    """Redis answered a command with an error."""


@dataclass(frozen=True, slots=True)
class Address:
    """Where and how to connect, from a Redis URL."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str = ""  # a unix socket instead of host:port
    tls: bool = False
    username: str = ""
    password: str = ""
    db: int = 0

    @classmethod
    def parse(cls, url: str) -> Address:
        """``redis://[user:password@]host[:port][/db]``, ``rediss://…``, ``unix:///path?db=N``."""
        parts = urlsplit(url)
        if parts.scheme not in {"redis", "rediss", "unix"}:
            raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r}")
        query = parse_qs(parts.query)
        db = query.get("db", [parts.path.strip("/") if parts.scheme != "unix" else ""])[0]
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            path=parts.path if parts.scheme == "unix" else "",
            tls=parts.scheme == "rediss",
            username=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            db=int(db or 0),
        )


def pack(commands: Sequence[Command]) -> bytes:
    """``commands`` in RESP, ready to write in one go."""
    out: list[bytes] = []
    for command in commands:
        out.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Pending:
    __slots__ = ("expected", "future", "replies", "sent_at")

    def __init__(self, future: asyncio.Future[list[Any]], expected: int) -> None:
        self.future = future
        self.expected = expected
        self.replies: list[Any] = []
        self.sent_at = time.monotonic()


class Connection(asyncio.Protocol):
    """One connection; replies are handed to the round trips in the order they were sent."""

    def __init__(self, timeout_s: float) -> None:
        self._reader = hiredis.Reader(encoding="utf-8", errors="surrogateescape")
        self._pending: collections.deque[_Pending] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._timeout_s = timeout_s
        self._watchdog: asyncio.TimerHandle | None = None
        self.closed = False

    # --- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            reply = self._reader.gets()
            if reply is False:
                return
            pending = self._pending[0]
            pending.replies.append(reply)
            if len(pending.replies) == pending.expected:
                self._pending.popleft()
                if not pending.future.done():  # a cancelled caller gave up its replies
                    pending.future.set_result(pending.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        error = ConnectionError(f"Redis connection lost: {exc or 'closed'}")
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(error)

    # --- use -----------------------------------------------------------------------------
    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """The replies to ``commands``, sent together (one round trip). Raises
        :class:`ReplyError` for an error reply, :class:`ConnectionError` when the connection
        fails or Redis stays silent past the timeout."""
        if self.closed or self._transport is None:
            raise ConnectionError("Redis connection closed")
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(future, len(commands)))
        self._transport.write(pack(commands))
        if self._watchdog is None:
            self._arm()
        replies = await future
        for reply in replies:
            if isinstance(reply, hiredis.ReplyError):
                raise ReplyError(str(reply))
        return replies

    def close(self) -> None:
        """Close the connection (waiting round trips fail)."""
        if self._transport is not None:
            self._transport.close()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(self._timeout_s, self._check)

    def _check(self) -> None:
        """Abort the connection when its oldest round trip has waited past the timeout."""
        self._watchdog = None
        if not self._pending or self.closed:
            return
        if time.monotonic() - self._pending[0].sent_at >= self._timeout_s:
            assert self._transport is not None
            self._transport.abort()  # connection_lost fails every waiting round trip
            return
        self._arm()


@dataclass
class _LoopState:
    connection: Connection | None = None
    connecting: asyncio.Task[Connection] | None = None


class Client:
    """Round trips to one Redis server from any event loop (a connection per loop)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self.address = Address.parse(url)
        self.timeout_s = timeout_s
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    async def execute(self, *commands: Command) -> list[Any]:
        """The replies to ``commands`` in one round trip (see :meth:`Connection.execute`)."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        connection = state.connection if state is not None else None
        if connection is None or connection.closed:
            connection = await self._connect(loop)
        return await connection.execute(commands)

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Connection:
        """This loop's connection, opened once however many callers arrive meanwhile.

        Also forgets the connections of loops that have closed (``asyncio.run``,
        ``async_to_sync``): a connection refers to its loop, so its entry would otherwise keep
        both alive; dropped, the socket is closed when the transport is collected."""
        for closed in [other for other in self._loops if other.is_closed()]:
            del self._loops[closed]
        state = self._loops.setdefault(loop, _LoopState())
        opening = state.connecting
        if opening is None or opening.done():
            opening = state.connecting = loop.create_task(self._open(loop))
        try:
            connection = await asyncio.shield(opening)
        finally:
            if opening.done() and state.connecting is opening:
                state.connecting = None
        state.connection = connection
        return connection

    async def _open(self, loop: asyncio.AbstractEventLoop) -> Connection:
        address = self.address

        def protocol() -> Connection:
            return Connection(self.timeout_s)

        if address.path:
            connecting = loop.create_unix_connection(protocol, address.path)
        else:
            connecting = loop.create_connection(
                protocol,
                address.host,
                address.port,
                ssl=ssl.create_default_context() if address.tls else None,
            )
        _, connection = await asyncio.wait_for(connecting, self.timeout_s)
        setup: list[Command] = []
        if address.password:
            auth = ("AUTH", address.username, address.password) if address.username else None
            setup.append(auth or ("AUTH", address.password))
        if address.db:
            setup.append(("SELECT", address.db))
        if setup:
            try:
                await connection.execute(setup)
            except BaseException:
                connection.close()
                raise
        return connection

    async def close(self) -> None:
        """Close this loop's connection."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None and state.connection is not None:
            state.connection.close()
