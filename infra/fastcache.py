"""A small async key-value store for the ``/v1`` hot path, on Redis.

Django's cache API runs its async methods on the one thread-sensitive executor thread, so each
call would queue behind every other sync call of the process. This store talks to Redis through
:mod:`infra.resp` (one pipelined connection per event loop, a fraction of redis-py's CPU per
round trip) and shares keys with the sync helpers below (redis-py; used by revocation in the
admin/dashboard), so every process sees the same state.
Values are JSON.
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings

from infra import jsonio, resp


def _prefix() -> str:
    return settings.INFRAI_CACHE_PREFIX + ":fc:"


_async_client: resp.Client | None = None
_sync_client: redis.Redis | None = None


def _redis_url() -> str:
    return str(settings.REDIS_URL)


def _aclient() -> resp.Client:
    """The async client for the configured URL (its connections are per event loop)."""
    global _async_client
    url = _redis_url()
    if _async_client is None or _async_client.url != url:
        _async_client = resp.Client(url)
    return _async_client


def _sclient() -> redis.Redis:
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(_redis_url(), decode_responses=True)
    return _sync_client


def encode(value: Any) -> str:
    """``value`` as this store writes it (what :func:`get_raw` returns for it):
    :func:`infra.jsonio.dumps` — orjson, ~10× faster than the standard library on a cached
    answer of 1,536 floats."""
    return jsonio.dumps(value).decode()


def decode(raw: str | bytes) -> Any:
    """A stored value (:func:`infra.jsonio.loads`: orjson, several times faster on large ones
    such as cached embeddings, with the standard library's answer for what orjson refuses)."""
    return jsonio.loads(raw)


async def get(key: str) -> Any:
    """The JSON value at ``key`` or None."""
    (raw,) = await _aclient().execute(("GET", _prefix() + key))
    return None if raw is None else decode(raw)


async def get_raw(key: str) -> str | None:
    """The value at ``key`` as stored (:func:`encode`d JSON text), or None: for callers that
    compare it with a copy they keep before paying for a parse."""
    (raw,) = await _aclient().execute(("GET", _prefix() + key))
    return raw  # type: ignore[no-any-return]


async def set(key: str, value: Any, ttl_s: float) -> None:
    """Store ``value`` (JSON-able) for ``ttl_s`` seconds."""
    await _aclient().execute(("SET", _prefix() + key, encode(value), "EX", max(int(ttl_s), 1)))


async def add(key: str, value: Any, ttl_s: float | None) -> bool:
    """Store only if absent; True when this call stored it (``SET NX``). ``ttl_s=None`` keeps
    the value until it is replaced (as :func:`set_sync`)."""
    expiry: list[str | int] = [] if ttl_s is None else ["EX", max(int(ttl_s), 1)]
    (stored,) = await _aclient().execute(("SET", _prefix() + key, encode(value), *expiry, "NX"))
    return stored is not None


async def delete(key: str) -> None:
    """Remove ``key``."""
    await _aclient().execute(("DEL", _prefix() + key))


async def append(key: str, values: list[str], ttl_s: float) -> None:
    """Append ``values`` (text, stored as given) to the list at ``key`` and (re)start its
    ``ttl_s``; one round trip."""
    if values:
        name = _prefix() + key
        await _aclient().execute(("RPUSH", name, *values), ("EXPIRE", name, max(int(ttl_s), 1)))


async def tail(key: str, start: int) -> list[str]:
    """The values of the list at ``key`` from index ``start`` on (``[]`` when none)."""
    (values,) = await _aclient().execute(("LRANGE", _prefix() + key, start, -1))
    return list(values or [])


async def get_many(keys: list[str]) -> dict[str, Any]:
    """The JSON values of ``keys`` that exist, in one round trip (``MGET``)."""
    if not keys:
        return {}
    (raws,) = await _aclient().execute(("MGET", *[_prefix() + key for key in keys]))
    return {key: decode(raw) for key, raw in zip(keys, raws, strict=True) if raw is not None}


async def delete_many(keys: list[str]) -> None:
    """Remove ``keys`` in one round trip."""
    if keys:
        await _aclient().execute(("DEL", *[_prefix() + key for key in keys]))


async def incr_many(items: list[tuple[str, int]], ttl_s: float) -> list[int]:
    """Add each amount to its counter (created with ``ttl_s`` on first use); one round trip."""
    return (await get_raw_and_incr_many(None, items, ttl_s))[1]


async def get_raw_and_incr_many(
    key: str | None, items: list[tuple[str, int]], ttl_s: float
) -> tuple[str | None, list[int]]:
    """:func:`get_raw` of ``key`` (None when ``key`` is None) and :func:`incr_many` of
    ``items``, in one round trip."""
    ttl = max(int(ttl_s), 1)
    commands: list[resp.Command] = [] if key is None else [("GET", _prefix() + key)]
    for name, amount in items:
        commands.append(("INCRBY", _prefix() + name, amount))
        commands.append(("EXPIRE", _prefix() + name, ttl, "NX"))
    results = await _aclient().execute(*commands)
    if key is None:
        return None, [int(v) for v in results[::2]]
    return results[0], [int(v) for v in results[1::2]]


def get_sync(key: str) -> Any:
    """:func:`get` for sync code."""
    raw = _sclient().get(_prefix() + key)
    return None if raw is None else decode(raw)


def set_sync(key: str, value: Any, ttl_s: float | None) -> None:
    """:func:`set` for sync code; ``ttl_s=None`` keeps the value until it is replaced."""
    ex = max(int(ttl_s), 1) if ttl_s is not None else None
    _sclient().set(_prefix() + key, encode(value), ex=ex)


def add_sync(key: str, value: Any, ttl_s: float | None) -> bool:
    """:func:`add` for sync code."""
    ex = max(int(ttl_s), 1) if ttl_s is not None else None
    return bool(_sclient().set(_prefix() + key, encode(value), ex=ex, nx=True))


def delete_sync(key: str) -> None:
    """:func:`delete` for sync code (admin, dashboard, management commands)."""
    _sclient().delete(_prefix() + key)


# Bumped by :func:`clear_sync`: what a process remembers having written (e.g. the latency a
# vendor's health last published) is stale once the store was emptied under it.
generation = 0


def clear_sync() -> None:
    """Remove every key of this store (tests)."""
    global generation
    generation += 1
    client = _sclient()
    for key in client.scan_iter(_prefix() + "*", count=1000):
        client.delete(key)
