"""A lean Redis client for the ``/v1`` hot path: one pipelined connection per event loop, to
one server (:class:`Client`) or to each master of a Redis Cluster (:class:`ClusterClient`).

redis-py's asyncio client costs 100–300 µs of CPU per round trip (a pool checkout guarded by
a condition, command objects, a retry wrapper, a response callback per command) — more than
the rest of a rate-limit check. Here a round trip is: pack the commands into one RESP buffer,
write it, and match the replies in order as hiredis (redis-py's own optional C parser) parses
them. Every task of the loop shares the one connection, as Redis answers a connection's
commands in the order it received them; many small calls in flight pipeline naturally.
Measured (``bench/redis_clients.py``, docs/performance.md "Redis clients", 2026-12-07, 2-core
dev machine): CPU per round trip of the rate-limit check's pipeline (GET + 2 × INCRBY/EXPIRE),
one server at c=1 · c=32, then a three-master cluster: this client 33 · 15 µs, 46 · 22 µs;
redis-py 8 with hiredis 112 · 83 µs, 158 · 121 µs; valkey-glide 2 (Rust core) 97 · 45 µs,
96 · 42 µs; coredis 6 184 · 176 µs, 245 · 237 µs. No library is as cheap, so this one stays,
and speaks Cluster itself (:class:`ClusterClient`).

Failure semantics: a connection that breaks or stays silent past ``timeout_s`` fails every
command waiting on it with :class:`ConnectionError` and is replaced on the next call; a failed
connection attempt makes the next ones wait a capped exponential backoff with jitter
(:data:`BACKOFF_BASE_S` doubling up to :data:`BACKOFF_CAP_S`), failing calls at once with
:class:`Unreachable` meanwhile, so an outage costs no connect per call. An error reply raises
:class:`ReplyError`. A caller cancelled while waiting loses its reply, never another
caller's. Supports ``redis://`` and ``rediss://`` (TLS) URLs with user, password and database
number, ``unix://`` sockets (``?db=N``), and ``redis+cluster://`` / ``rediss+cluster://``
seed lists (:class:`ClusterClient`).

Cluster mode: the slot map comes from ``CLUSTER SLOTS``; each round trip goes to the master of
its keys' hash slot (CRC16 with the ``{hash tag}`` rule, :func:`key_slot`). All keys of one
round trip must share a slot — :class:`CrossSlot` otherwise, before anything is sent: give
keys that one pipeline touches together a common hash tag. ``MOVED`` updates the map (and
refreshes it) and re-sends the moved commands; ``ASK`` re-sends them once to the importing
node after ``ASKING``; ``TRYAGAIN``/``CLUSTERDOWN``/``LOADING`` are retried with backoff,
then raise :class:`ClusterDown` (a :class:`ConnectionError`: a retryable 503 upstream). A
command is re-sent only when Redis said it did not run it, or when the connection could not
be opened (nothing was sent): a connection lost mid-round-trip is the caller's
:class:`ConnectionError`, as a counter may have counted.
"""

from __future__ import annotations

import asyncio
import collections
import random
import ssl
import time
import weakref
from binascii import crc_hqx
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

Command = Sequence[str | int | bytes]
# A failed connection attempt waits this long before the next, doubling per failure up to the
# cap, each delay drawn from [d/2, d] (jitter: processes that lost one server do not return
# in step).
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0
SLOTS = 16384


class ReplyError(Exception):
    """Redis answered a command with an error."""


class Unreachable(ConnectionError):
    """No connection could be opened (or the backoff after a failed attempt is running):
    nothing of the round trip was sent."""


class ClusterDown(ConnectionError):
    """The cluster kept refusing the round trip (``CLUSTERDOWN``, ``TRYAGAIN``, ``LOADING``,
    redirects without end) through every retry: its slots are failing over or migrating."""


class CrossSlot(ValueError):
    """The keys of one round trip hash to different cluster slots (a bug of the caller: give
    them a common ``{hash tag}``)."""


def backoff_s(failures: int) -> float:
    """The wait after ``failures`` consecutive failed attempts (>= 1), with jitter."""
    delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (failures - 1))
    return delay / 2 + random.random() * delay / 2


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

    @property
    def node(self) -> tuple[str, int]:
        """``(host, port)``."""
        return (self.host, self.port)

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


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return url.startswith(("redis+cluster://", "rediss+cluster://"))


def parse_cluster_url(url: str) -> list[Address]:
    """The seed nodes of ``[redis|rediss]+cluster://[user:password@]host:port,host:port[/]``,
    each with the URL's credentials and transport (a cluster has only database 0)."""
    scheme, sep, rest = url.partition("+cluster://")
    if not sep or scheme not in {"redis", "rediss"}:
        raise ValueError("a cluster URL is redis+cluster://host:port,… or rediss+cluster://…")
    netloc, _, path = rest.partition("/")
    if path.strip("/") not in {"", "0"}:
        raise ValueError("a Redis Cluster has only database 0")
    auth, _, hosts = netloc.rpartition("@")
    seeds = [
        Address.parse(f"{scheme}://{auth + '@' if auth else ''}{host.strip()}")
        for host in hosts.split(",")
        if host.strip()
    ]
    if not seeds:
        raise ValueError("a cluster URL names at least one host:port")
    return seeds


def key_slot(key: str | bytes) -> int:
    """The cluster slot of ``key``: CRC16 (XMODEM) of the key, or of its hash tag — the text
    between the first ``{`` and the first ``}`` after it, when that is not empty."""
    data = key if isinstance(key, bytes) else key.encode()
    start = data.find(b"{")
    if start > -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return crc_hqx(data, 0) % SLOTS


# Commands that name no key (any node answers them), and those whose every argument is a key.
_KEYLESS = frozenset(
    {"PING", "ASKING", "AUTH", "CLIENT", "CLUSTER", "COMMAND", "DBSIZE", "ECHO", "FLUSHALL"}
    | {"FLUSHDB", "HELLO", "INFO", "READONLY", "SCAN", "SELECT", "TIME", "DEBUG", "CONFIG"}
)
_ALL_KEYS = frozenset({"MGET", "DEL", "UNLINK", "EXISTS", "TOUCH", "WATCH"})


def command_keys(command: Command) -> Sequence[str | int | bytes]:
    """The keys ``command`` touches (the first argument, unless its name says otherwise)."""
    name = str(command[0]).upper()
    if name in _KEYLESS:
        return ()
    if name in _ALL_KEYS:
        return command[1:]
    if name == "MSET":
        return command[1::2]
    if name in {"EVAL", "EVALSHA", "FCALL"}:
        return command[3 : 3 + int(command[2])]
    return command[1:2]


def slot_of(commands: Sequence[Command]) -> int | None:
    """The one slot of every key of ``commands`` (None when they name no key); raises
    :class:`CrossSlot` when they span several."""
    found: int | None = None
    for command in commands:
        for key in command_keys(command):
            slot = key_slot(key if isinstance(key, (str, bytes)) else str(key))
            if found is None:
                found = slot
            elif slot != found:
                names = [k for c in commands for k in command_keys(c)]
                raise CrossSlot(
                    f"keys of one Redis round trip hash to different cluster slots: {names!r}"
                    " (give them a common {hash tag})"
                )
    return found


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
    async def execute(self, commands: Sequence[Command], *, raw: bool = False) -> list[Any]:
        """The replies to ``commands``, sent together (one round trip). Raises
        :class:`ReplyError` for an error reply (``raw``: returns it in place, a
        ``hiredis.ReplyError``), :class:`ConnectionError` when the connection fails or Redis
        stays silent past the timeout. Every round trip of the module passes here."""
        if self.closed or self._transport is None:
            raise ConnectionError("Redis connection closed")
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(future, len(commands)))
        self._transport.write(pack(commands))
        if self._watchdog is None:
            self._arm()
        replies = await future
        return replies if raw else raise_errors(replies)

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


def raise_errors(replies: list[Any]) -> list[Any]:
    """``replies``, or :class:`ReplyError` for the first error reply among them."""
    for reply in replies:
        if isinstance(reply, hiredis.ReplyError):
            raise ReplyError(str(reply))
    return replies


@dataclass
class _LoopState:
    connection: Connection | None = None
    connecting: asyncio.Task[Connection] | None = None
    failures: int = 0  # consecutive failed connection attempts
    retry_at: float = 0.0  # monotonic: no attempt before


class Client:
    """Round trips to one Redis server from any event loop (a connection per loop)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, address: Address | None = None) -> None:
        self.url = url
        self.address = address or Address.parse(url)
        self.timeout_s = timeout_s
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    async def execute(self, *commands: Command) -> list[Any]:
        """The replies to ``commands`` in one round trip (see :meth:`Connection.execute`);
        :class:`Unreachable` when no connection could be had (nothing sent)."""
        return await (await self._connection()).execute(commands)

    async def roundtrip(self, commands: Sequence[Command]) -> list[Any]:
        """:meth:`execute` with error replies returned in place."""
        return await (await self._connection()).execute(commands, raw=True)

    async def _connection(self) -> Connection:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        connection = state.connection if state is not None else None
        if connection is None or connection.closed:
            connection = await self._connect(loop)
        return connection

    def slot_groups(self, keys: list[str]) -> list[list[str]]:
        """``keys`` split into the groups one round trip may carry: one server, one group."""
        return [keys]

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
            wait_s = state.retry_at - time.monotonic()
            if wait_s > 0:
                raise Unreachable(
                    f"Redis at {self._where()} unreachable; next attempt in {wait_s * 1000:.0f} ms"
                )
            opening = state.connecting = loop.create_task(self._open(loop))
        try:
            connection = await asyncio.shield(opening)
        except OSError as exc:  # TimeoutError included
            if state.connecting is opening:  # the first of the waiters counts the failure
                state.connecting = None
                state.failures += 1
                state.retry_at = time.monotonic() + backoff_s(state.failures)
            raise Unreachable(f"Redis at {self._where()} unreachable: {exc!r}") from exc
        finally:
            if opening.done() and state.connecting is opening:
                state.connecting = None
        state.failures = 0
        state.connection = connection
        return connection

    def _where(self) -> str:
        return self.address.path or f"{self.address.host}:{self.address.port}"

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


# Error replies that say the command did not run and where it should go / when to retry.
_REDIRECTS = ("MOVED ", "ASK ")
_RETRY_LATER = ("TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")
# Redirects and retries one round trip may go through before it fails.
MAX_ATTEMPTS = 6
# The slot map is refreshed at most this often on redirects and lost nodes.
REFRESH_EVERY_S = 0.1


class ClusterClient:
    """Round trips to a Redis Cluster from any event loop: a :class:`Client` (one pipelined
    connection per loop) per master, each round trip routed by its keys' slot (module
    docstring: what is re-sent and what fails)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.seeds = parse_cluster_url(url)
        self._template = self.seeds[0]
        self._nodes: dict[tuple[str, int], Client] = {}
        self._slots: list[tuple[str, int]] | None = None  # the master of each slot
        self._refreshed_at = 0.0
        self._refreshing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]]
        self._refreshing = weakref.WeakKeyDictionary()

    async def execute(self, *commands: Command) -> list[Any]:
        """The replies to ``commands``, whose keys share one slot, in one round trip to that
        slot's master (more only on redirects). Raises :class:`CrossSlot`,
        :class:`ReplyError`, :class:`ConnectionError` (:class:`ClusterDown`,
        :class:`Unreachable`)."""
        return raise_errors(await self.roundtrip(commands))

    async def roundtrip(self, commands: Sequence[Command]) -> list[Any]:
        """:meth:`execute` with error replies (other than redirects) returned in place."""
        slot = slot_of(commands)
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        asking: tuple[str, int] | None = None
        for attempt in range(MAX_ATTEMPTS):
            node = asking or await self._node_of(slot)
            batch: list[Command] = [commands[i] for i in todo]
            if asking is not None:
                batch = [c for command in batch for c in (("ASKING",), command)]
            try:
                got = await self._client(node).roundtrip(batch)
            except Unreachable:
                await self._refresh(force=True)  # the next attempt, if any, on the new map
                if attempt >= 1:
                    raise
                continue
            except ConnectionError:
                self._stale()
                raise
            if asking is not None:
                got = got[1::2]  # ASKING's OKs
            asking, retry, redirected = None, False, []
            for index, reply in zip(todo, got, strict=True):
                text = str(reply) if isinstance(reply, hiredis.ReplyError) else ""
                if text.startswith(_REDIRECTS):
                    kind, _, target = text.split(" ")
                    host, _, port = target.rpartition(":")
                    where = (host or node[0], int(port))
                    if kind == "MOVED":
                        self._moved(slot, where)
                    else:
                        asking = where
                    redirected.append(index)
                elif text.startswith(_RETRY_LATER) or text.startswith("READONLY"):
                    retry = True
                    redirected.append(index)
                else:
                    replies[index] = reply
            if not redirected:
                return replies
            todo = redirected
            if retry:
                await asyncio.sleep(backoff_s(attempt + 1))
                await self._refresh(force=False)
        raise ClusterDown(f"Redis Cluster refused the round trip {MAX_ATTEMPTS} times")

    def slot_groups(self, keys: list[str]) -> list[list[str]]:
        """``keys`` grouped by slot, in first-seen order: a round trip per group."""
        groups: dict[int, list[str]] = {}
        for key in keys:
            groups.setdefault(key_slot(key), []).append(key)
        return list(groups.values())

    async def close(self) -> None:
        """Close this loop's connections to every node."""
        for client in list(self._nodes.values()):
            await client.close()

    # --- the slot map ---------------------------------------------------------------------
    async def _node_of(self, slot: int | None) -> tuple[str, int]:
        if self._slots is None:
            await self._refresh(force=True)
        assert self._slots is not None
        return self._slots[0 if slot is None else slot]

    def _client(self, node: tuple[str, int]) -> Client:
        client = self._nodes.get(node)
        if client is None:
            address = replace(self._template, host=node[0], port=node[1])
            url = f"{'rediss' if address.tls else 'redis'}://{node[0]}:{node[1]}"
            client = self._nodes[node] = Client(url, timeout_s=self.timeout_s, address=address)
        return client

    def _moved(self, slot: int | None, node: tuple[str, int]) -> None:
        if self._slots is not None and slot is not None:
            self._slots[slot] = node
        self._stale()

    def _stale(self) -> None:
        """Refresh the map soon (in the background of this loop, at most every
        :data:`REFRESH_EVERY_S`)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        running = self._refreshing.get(loop)
        if running is None or running.done():
            self._refreshing[loop] = loop.create_task(self._refresh(force=False))

    async def _refresh(self, *, force: bool) -> None:
        """Read ``CLUSTER SLOTS`` from the first node that answers (the known masters, then
        the seeds); raises :class:`Unreachable` when none does and no map is known."""
        if not force and time.monotonic() - self._refreshed_at < REFRESH_EVERY_S:
            return
        self._refreshed_at = time.monotonic()
        known = list(dict.fromkeys(self._slots or ()))
        candidates = list(dict.fromkeys([*known, *(seed.node for seed in self.seeds)]))
        failure: BaseException | None = None
        for node in candidates:
            try:
                (ranges,) = await self._client(node).execute(("CLUSTER", "SLOTS"))
            except (ConnectionError, ReplyError) as exc:
                failure = exc
                continue
            slots = list(self._slots or [node] * SLOTS)
            for start, end, master, *_replicas in ranges:
                owner = (str(master[0]) or node[0], int(master[1]))
                slots[int(start) : int(end) + 1] = [owner] * (int(end) - int(start) + 1)
            self._slots = slots
            return
        if self._slots is None:
            raise Unreachable(f"no node of the Redis Cluster answered: {failure!r}") from failure
