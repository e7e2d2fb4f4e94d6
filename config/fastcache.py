"""A small async key-value store for the ``/v1`` hot path: Redis when configured, else memory.

Django's cache API runs its async methods on the one thread-sensitive executor thread, so each
call would queue behind every other sync call of the process. This store talks to Redis with
``redis.asyncio`` directly (one pool per event loop) and shares keys with the sync helpers below
(used by revocation in the admin/dashboard), so every process sees the same state.
Values are JSON. In the embedded default (no ``REDIS_URL``) it is a process-local dict.

On ``redis://`` URLs the async side is :class:`_Resp`: one connection per event loop speaking
RESP directly, every command of every concurrent call pipelined on it (replies come back in
order). A command costs a few tens of µs of CPU where redis-py's asyncio client (connection
pool with a lock, per-command object churn) spent several hundred; Redis itself gets the same
commands. Other URLs (``rediss://``, ``unix://``) keep redis-py's blocking pool.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
import weakref
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from django.conf import settings


def _prefix() -> str:
    return getattr(settings, "INFRAI_CACHE_PREFIX", "infrai") + ":fc:"


class _Memory:
    def __init__(self) -> None:
        self._data: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def _live(self, key: str, now: float) -> Any:
        item = self._data.get(key)
        if item is None:
            return None
        if item[0] <= now:
            del self._data[key]
            return None
        return item[1]

    def get(self, key: str) -> Any:
        with self._lock:
            return self._live(key, time.monotonic())

    def set(self, key: str, value: Any, ttl_s: float) -> None:
        with self._lock:
            self._data[key] = (time.monotonic() + ttl_s, value)

    def add(self, key: str, value: Any, ttl_s: float) -> bool:
        with self._lock:
            now = time.monotonic()
            if self._live(key, now) is not None:
                return False
            self._data[key] = (now + ttl_s, value)
            return True

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

    def incr(self, key: str, amount: int, ttl_s: float) -> int:
        with self._lock:
            now = time.monotonic()
            current = self._live(key, now)
            if current is None:
                self._data[key] = (now + ttl_s, amount)
                return amount
            expires = self._data[key][0]
            self._data[key] = (expires, current + amount)
            return int(current + amount)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_memory = _Memory()
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = (
    weakref.WeakKeyDictionary()
)
_sync_client: redis.Redis | None = None


def _redis_url() -> str:
    return str(getattr(settings, "REDIS_URL", "") or "")


# Connections one process keeps to Redis, and how long a call waits for a free one when a
# burst holds them all (redis-py's default pool raises at once instead: a 500 the SDKs retry).
POOL_MAX_CONNECTIONS = 256
POOL_WAIT_S = 5.0


def _aclient() -> aioredis.Redis:
    """This event loop's client, over a pool that waits (bounded) for a free connection."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        pool: aioredis.BlockingConnectionPool = aioredis.BlockingConnectionPool.from_url(
            _redis_url(),
            decode_responses=True,
            max_connections=POOL_MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
        )
        client = aioredis.Redis(connection_pool=pool)
        _async_clients[loop] = client
    return client


class _Resp(asyncio.Protocol):
    """One Redis connection: commands are written at once, replies matched to them in order.

    A caller cancelled while waiting leaves its future behind; its reply is read and dropped,
    so the replies of later commands still reach their callers. A lost connection fails every
    pending command with :class:`redis.exceptions.ConnectionError`; the next call reconnects.
    """

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have the same API.
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos = 0
        while self._waiting:
            parsed = _parse(buffer, pos)
            if parsed is None:
                break
            value, pos = parsed
            waiter = self._waiting.popleft()
            if not waiter.done():
                if isinstance(value, redis.exceptions.ResponseError):
                    waiter.set_exception(value)
                else:
                    waiter.set_result(value)
        if pos:
            del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(redis.exceptions.ConnectionError("Redis connection lost"))

    def send(self, commands: list[tuple[Any, ...]]) -> list[asyncio.Future[Any]]:
        """Write ``commands`` in one go; one future per reply."""
        if self.closed or self._transport is None or self._transport.is_closing():
            raise redis.exceptions.ConnectionError("Redis connection closed")
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in commands]
        self._waiting.extend(futures)
        self._transport.write(b"".join(_pack(command) for command in commands))
        return futures

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _pack(command: tuple[Any, ...]) -> bytes:
    out = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _parse(buffer: bytearray, pos: int) -> tuple[Any, int] | None:
    """One RESP2 reply at ``pos``: ``(value, end)``, or None while it is incomplete."""
    end = buffer.find(b"\r\n", pos)
    if end < 0:
        return None
    kind = buffer[pos]
    line = bytes(buffer[pos + 1 : end])
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, end + 2
        stop = end + 2 + size
        if len(buffer) < stop + 2:
            return None
        return bytes(buffer[end + 2 : stop]), stop + 2
    if kind == 58:  # : integer
        return int(line), end + 2
    if kind == 43:  # + simple string
        return line.decode(), end + 2
    if kind == 45:  # - error
        return redis.exceptions.ResponseError(line.decode(errors="replace")), end + 2
    if kind == 42:  # * array
        count = int(line)
        if count < 0:
            return None, end + 2
        items: list[Any] = []
        pos = end + 2
        for _ in range(count):
            parsed = _parse(buffer, pos)
            if parsed is None:
                return None
            item, pos = parsed
            items.append(item)
        return items, pos
    raise redis.exceptions.ConnectionError(f"Unexpected Redis reply type {chr(kind)!r}")


_resp: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Resp] = weakref.WeakKeyDictionary()
_resp_connecting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _native() -> bool:
    return _redis_url().startswith("redis://")


async def _connection() -> _Resp:
    loop = asyncio.get_running_loop()
    conn = _resp.get(loop)
    if conn is not None and not conn.closed:
        return conn
    lock = _resp_connecting.setdefault(loop, asyncio.Lock())
    async with lock:
        conn = _resp.get(loop)
        if conn is not None and not conn.closed:
            return conn
        url = urlsplit(_redis_url())
        try:
            _, conn = await loop.create_connection(
                _Resp, url.hostname or "127.0.0.1", url.port or 6379
            )
        except OSError as exc:
            raise redis.exceptions.ConnectionError(f"Cannot connect to Redis: {exc}") from exc
        setup: list[tuple[Any, ...]] = []
        if url.password:
            user = unquote(url.username) if url.username else None
            password = unquote(url.password)
            setup.append(("AUTH", user, password) if user else ("AUTH", password))
        db = (url.path or "/").strip("/")
        if db and db != "0":
            setup.append(("SELECT", int(db)))
        if setup:
            try:
                await asyncio.gather(*conn.send(setup))
            except BaseException:
                conn.close()
                raise
        _resp[loop] = conn
        return conn


async def _execute(*commands: tuple[Any, ...]) -> list[Any]:
    """Send ``commands`` pipelined on this loop's connection; their replies in order."""
    conn = await _connection()
    return list(await asyncio.gather(*conn.send(list(commands))))


def _sclient() -> redis.Redis:
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(_redis_url(), decode_responses=True)
    return _sync_client


async def get(key: str) -> Any:
    """The JSON value at ``key`` or None."""
    if not _redis_url():
        return _memory.get(key)
    if _native():
        (raw,) = await _execute(("GET", _prefix() + key))
    else:
        raw = await _aclient().get(_prefix() + key)
    return None if raw is None else json.loads(raw)


async def set(key: str, value: Any, ttl_s: float) -> None:
    """Store ``value`` (JSON-able) for ``ttl_s`` seconds."""
    if not _redis_url():
        _memory.set(key, value, ttl_s)
        return
    if _native():
        await _execute(("SET", _prefix() + key, json.dumps(value), "EX", max(int(ttl_s), 1)))
        return
    await _aclient().set(_prefix() + key, json.dumps(value), ex=max(int(ttl_s), 1))


async def add(key: str, value: Any, ttl_s: float) -> bool:
    """Store only if absent; True when this call stored it (``SET NX``)."""
    if not _redis_url():
        return _memory.add(key, value, ttl_s)
    if _native():
        (done,) = await _execute(
            ("SET", _prefix() + key, json.dumps(value), "EX", max(int(ttl_s), 1), "NX")
        )
        return bool(done)
    return bool(
        await _aclient().set(_prefix() + key, json.dumps(value), ex=max(int(ttl_s), 1), nx=True)
    )


async def delete(key: str) -> None:
    """Remove ``key``."""
    if not _redis_url():
        _memory.delete(key)
        return
    if _native():
        await _execute(("DEL", _prefix() + key))
        return
    await _aclient().delete(_prefix() + key)


async def get_many(keys: list[str]) -> dict[str, Any]:
    """The JSON values of ``keys`` that exist, in one round trip (``MGET``)."""
    if not keys:
        return {}
    if not _redis_url():
        found = {key: _memory.get(key) for key in keys}
        return {k: v for k, v in found.items() if v is not None}
    if _native():
        (raws,) = await _execute(("MGET", *[_prefix() + key for key in keys]))
    else:
        raws = await _aclient().mget([_prefix() + key for key in keys])
    return {key: json.loads(raw) for key, raw in zip(keys, raws, strict=True) if raw is not None}


async def delete_many(keys: list[str]) -> None:
    """Remove ``keys`` in one round trip."""
    if not _redis_url():
        for key in keys:
            _memory.delete(key)
        return
    if keys and _native():
        await _execute(("DEL", *[_prefix() + key for key in keys]))
    elif keys:
        await _aclient().delete(*[_prefix() + key for key in keys])


async def incr_many(items: list[tuple[str, int]], ttl_s: float) -> list[int]:
    """Add each amount to its counter (created with ``ttl_s`` on first use); one round trip."""
    if not _redis_url():
        return [_memory.incr(key, amount, ttl_s) for key, amount in items]
    if _native():
        ttl = max(int(ttl_s), 1)
        commands: list[tuple[Any, ...]] = []
        for key, amount in items:
            commands.append(("INCRBY", _prefix() + key, amount))
            commands.append(("EXPIRE", _prefix() + key, ttl, "NX"))
        return [int(v) for v in (await _execute(*commands))[::2]]
    pipe = _aclient().pipeline(transaction=False)
    for key, amount in items:
        pipe.incrby(_prefix() + key, amount)
        pipe.expire(_prefix() + key, max(int(ttl_s), 1), nx=True)
    results = await pipe.execute()
    return [int(v) for v in results[::2]]


def get_sync(key: str) -> Any:
    """:func:`get` for sync code."""
    if not _redis_url():
        return _memory.get(key)
    raw = _sclient().get(_prefix() + key)
    return None if raw is None else json.loads(raw)  # type: ignore[arg-type]


def set_sync(key: str, value: Any, ttl_s: float | None) -> None:
    """:func:`set` for sync code; ``ttl_s=None`` keeps the value until it is replaced."""
    if not _redis_url():
        _memory.set(key, value, ttl_s if ttl_s is not None else 10**9)
        return
    ex = max(int(ttl_s), 1) if ttl_s is not None else None
    _sclient().set(_prefix() + key, json.dumps(value), ex=ex)


def add_sync(key: str, value: Any, ttl_s: float | None) -> bool:
    """:func:`add` for sync code."""
    if not _redis_url():
        return _memory.add(key, value, ttl_s if ttl_s is not None else 10**9)
    ex = max(int(ttl_s), 1) if ttl_s is not None else None
    return bool(_sclient().set(_prefix() + key, json.dumps(value), ex=ex, nx=True))


def delete_sync(key: str) -> None:
    """:func:`delete` for sync code (admin, dashboard, management commands)."""
    if not _redis_url():
        _memory.delete(key)
        return
    _sclient().delete(_prefix() + key)


# Bumped by :func:`clear_sync`: what a process remembers having written (e.g. the latency a
# vendor's health last published) is stale once the store was emptied under it.
generation = 0


def clear_sync() -> None:
    """Remove every key of this store (tests)."""
    global generation
    generation += 1
    if not _redis_url():
        _memory.clear()
        return
    client = _sclient()
    for key in client.scan_iter(_prefix() + "*", count=1000):
        client.delete(key)
