"""A small async key-value store for the ``/v1`` hot path, on Redis (one server or a Cluster).

Django's cache API runs its async methods on the one thread-sensitive executor thread, so each
call would queue behind every other sync call of the process. This store talks to Redis through
:mod:`infra.resp` (one pipelined connection per event loop — per master in a cluster — a
fraction of redis-py's CPU per round trip) and shares keys with the sync helpers below
(redis-py, :class:`redis.cluster.RedisCluster` for a cluster; used by revocation in the
admin/dashboard and the catalog version), so every process sees the same state. Its server is
``INFRAI_HOT_REDIS_URL`` (``REDIS_URL``'s unless set; ``redis+cluster://…`` for a cluster).

Cluster-safe keys: every round trip's keys share a hash slot — a multi-key pipeline's keys carry
one ``{hash tag}`` (``inference.limits``: the key's cache entry and its counters), and
:func:`get_many` / :func:`delete_many` send one round trip per slot, concurrently.
Values are JSON.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.cluster
from django.conf import settings

from infra import jsonio, resp


def _prefix() -> str:
    return settings.INFRAI_CACHE_PREFIX + ":fc:"


_async_client: resp.Client | resp.ClusterClient | None = None
_sync_client: redis.Redis | redis.cluster.RedisCluster | None = None
_sync_url = ""


def _redis_url() -> str:
    return str(settings.INFRAI_HOT_REDIS_URL)


def _aclient() -> resp.Client | resp.ClusterClient:
    """The async client for the configured URL (its connections are per event loop)."""
    global _async_client
    url = _redis_url()
    if _async_client is None or _async_client.url != url:
        _async_client = resp.ClusterClient(url) if resp.is_cluster_url(url) else resp.Client(url)
    return _async_client


def _sclient() -> redis.Redis | redis.cluster.RedisCluster:
    """The sync client for the configured URL: redis-py, its cluster client for a cluster."""
    global _sync_client, _sync_url
    url = _redis_url()
    if _sync_client is None or _sync_url != url:
        _sync_client, _sync_url = _sync_client_for(url), url
    return _sync_client


def _sync_client_for(url: str) -> redis.Redis | redis.cluster.RedisCluster:
    if not resp.is_cluster_url(url):
        return redis.Redis.from_url(url, decode_responses=True)
    seeds = resp.parse_cluster_url(url)
    return redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(seed.host, seed.port) for seed in seeds],
        username=seeds[0].username or None,
        password=seeds[0].password or None,
        ssl=seeds[0].tls,
        decode_responses=True,
    )


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
    """The JSON values of ``keys`` that exist, in one round trip (``MGET``; one per slot,
    concurrently, in a cluster)."""
    if not keys:
        return {}
    prefix = _prefix()
    names = dict(zip([prefix + key for key in keys], keys, strict=True))
    found: dict[str, Any] = {}
    for group, (raws,) in await _per_slot("MGET", list(names)):
        found.update(
            (names[name], decode(raw))
            for name, raw in zip(group, raws, strict=True)
            if raw is not None
        )
    return found


async def delete_many(keys: list[str]) -> None:
    """Remove ``keys`` in one round trip (one per slot, concurrently, in a cluster)."""
    if keys:
        await _per_slot("DEL", [_prefix() + key for key in keys])


async def _per_slot(command: str, names: list[str]) -> list[tuple[list[str], list[Any]]]:
    """``command`` over ``names`` (full key names), one round trip per group the client can
    carry in one (:meth:`infra.resp.Client.slot_groups`): each group with its replies."""
    client = _aclient()
    groups = client.slot_groups(names)
    if len(groups) == 1:
        return [(groups[0], await client.execute((command, *groups[0])))]
    replies = await asyncio.gather(*(client.execute((command, *group)) for group in groups))
    return list(zip(groups, replies, strict=True))


async def incr_many(items: list[tuple[str, int]], ttl_s: float) -> list[int]:
    """Add each amount to its counter (created with ``ttl_s`` on first use); one round trip
    (names of one slot in a cluster, as :func:`get_raw_and_incr_many`)."""
    return (await get_raw_and_incr_many(None, items, ttl_s))[1]


async def get_raw_and_incr_many(
    key: str | None, items: list[tuple[str, int]], ttl_s: float
) -> tuple[str | None, list[int]]:
    """:func:`get_raw` of ``key`` (None when ``key`` is None) and :func:`incr_many` of
    ``items``, in one round trip. In a cluster every name must share one hash slot (a common
    ``{hash tag}``), else :class:`infra.resp.CrossSlot`."""
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
    for key in client.scan_iter(_prefix() + "*", count=1000):  # every master's, in a cluster
        client.delete(key)
