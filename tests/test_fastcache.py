"""The hot path's Redis client under a burst larger than its connection pool."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from config import fastcache

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="the pool exists only on Redis")


def test_a_burst_beyond_the_pool_waits_for_connections_instead_of_failing(monkeypatch):
    monkeypatch.setattr(fastcache, "POOL_MAX_CONNECTIONS", 4)

    async def burst() -> list[object]:
        await fastcache.set("burst", {"n": 1}, 30)
        return await asyncio.gather(*(fastcache.get("burst") for _ in range(300)))

    results = asyncio.run(burst())
    assert results == [{"n": 1}] * 300  # redis-py's default pool raised "Too many connections"
