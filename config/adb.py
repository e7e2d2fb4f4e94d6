"""The ``/v1`` hot path's own PostgreSQL access: an async psycopg pool per event loop.

Django's ORM is synchronous: every ORM call from the event loop is a hop onto a worker thread,
plus Django's connection handling and query compilation — about a third of the gateway's CPU
per call before this module. The two statements every metered call makes (open the hold;
write the request log and settle) run here instead, on the loop, as raw SQL on pooled
autocommit connections. psycopg prepares a statement on a connection after its fifth use, so
PostgreSQL parses and plans each of them once per connection.

Only for PostgreSQL (:func:`enabled`); on SQLite (``make run``'s embedded default) callers keep
the ORM path in a thread. The pool reads the connection parameters from
``settings.DATABASES["default"]`` when first used on a loop (so tests' database names apply).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from django.conf import settings
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = (
    weakref.WeakKeyDictionary()
)


def enabled() -> bool:
    """Whether the default database is PostgreSQL (the only engine this module serves)."""
    return bool(settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql")


def _conninfo() -> str:
    db = settings.DATABASES["default"]
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in {"pool"}}
    params = {
        "dbname": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "host": db.get("HOST"),
        "port": str(db.get("PORT") or ""),
        **options,
    }
    return make_conninfo(**{k: v for k, v in params.items() if v not in (None, "")})


async def _pool() -> AsyncConnectionPool:
    """The running loop's pool, opened on first use."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = AsyncConnectionPool(
            _conninfo(),
            min_size=1,
            max_size=int(settings.INFRAI_ASYNC_DB_POOL_SIZE),
            kwargs={"autocommit": True},
            # A connection idle this long is closed (the pool keeps min_size).
            max_idle=60.0,
            timeout=10.0,
            open=False,
            name="infrai-v1",
        )
        _pools[loop] = pool
        await pool.open()
    return pool


@asynccontextmanager
async def connection() -> AsyncIterator[AsyncConnection]:
    """A pooled autocommit connection: each statement is its own transaction."""
    pool = await _pool()
    async with pool.connection() as conn:
        yield conn


@asynccontextmanager
async def transaction() -> AsyncIterator[AsyncConnection]:
    """A pooled connection inside one transaction: committed when the block ends, rolled back
    if it raises."""
    async with connection() as conn, conn.transaction():
        yield conn


async def close() -> None:
    """Close the running loop's pool (process shutdown; tests before they drop the database)."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
