"""The ``/v1`` hot path's own PostgreSQL access: an asyncpg pool per event loop.

Django's ORM is synchronous: every ORM call from the event loop is a hop onto a worker thread,
plus Django's connection handling and query compilation. The statements every metered call
makes (open the hold; write the request log and settle; wait for the disk: :func:`flush`) run
here instead, on the loop, as raw SQL on pooled connections in autocommit (a statement outside
:func:`transaction` is its own transaction). asyncpg speaks PostgreSQL's binary protocol from
C and prepares every statement once per connection (its statement cache), so a call costs
PostgreSQL no parse or plan and the gateway a few tens of microseconds of Python per statement
(psycopg's async cursor cost about five times that: query conversion, adaptation and its wait
loop).

Statements are written once with psycopg's named placeholders (``%(name)s``, shared with the
ORM-side code that runs the same SQL through Django's cursor) and compiled here to asyncpg's
positional ``$n`` by :class:`Statement`. A JSON column takes its value as JSON text
(:func:`json_text`): no per-connection codec, whose set-up costs each new connection a catalog
query.

The pool reads the connection parameters from ``settings.DATABASES["default"]`` when first
used on a loop (so tests' database names apply). Behind PgBouncer in transaction mode
(``INFRAI_DB_POOLER=transaction``) the statement cache is off: each statement is parsed unnamed.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
from django.conf import settings

from infra import jsonio, outages

_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncpg.Pool] = (
    weakref.WeakKeyDictionary()
)
_opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[asyncpg.Pool]] = (
    weakref.WeakKeyDictionary()
)
_NAMED = re.compile(r"%\((\w+)\)s|%s")

# Raised by a statement that would duplicate a unique key (e.g. a second hold of a request).
UniqueViolation = asyncpg.UniqueViolationError


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement in asyncpg's form: ``sql`` with ``$1…$n``, and the parameter names
    in that order (``"0"``, ``"1"``… for a statement written with plain ``%s``)."""

    sql: str
    names: tuple[str, ...]

    @classmethod
    def compile(cls, sql: str) -> Statement:
        """``sql`` written with psycopg placeholders — all ``%(name)s`` or all ``%s`` — as a
        :class:`Statement`. A name used twice is one parameter. ``%%`` is not supported (no
        statement here has a literal percent sign)."""
        names: list[str] = []
        positional = 0

        def number(match: re.Match[str]) -> str:
            nonlocal positional
            name = match.group(1)
            if name is None:
                name = str(positional)
                positional += 1
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        compiled = _NAMED.sub(number, sql)
        if positional and len(names) != positional:
            raise ValueError("a statement mixes %s and %(name)s placeholders")
        return cls(sql=compiled, names=tuple(names))

    def args(self, params: Mapping[str, Any] | list[Any]) -> list[Any]:
        """The positional arguments for ``params`` (a mapping by name, or a list for ``%s``)."""
        if isinstance(params, list):
            return params
        return [params[name] for name in self.names]


def _connect_kwargs() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in {"pool"}}
    params: dict[str, Any] = {
        "database": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "host": db.get("HOST"),
        "port": int(db["PORT"]) if db.get("PORT") else None,
    }
    if "sslmode" in options:
        params["ssl"] = options["sslmode"]
    if "application_name" in options:  # ``?application_name=…`` in DATABASE_URL, as psycopg
        params["server_settings"] = {"application_name": str(options["application_name"])}
    if settings.INFRAI_DB_POOLER == "transaction":
        # Behind a pooler in transaction mode a named prepared statement may be gone on the next
        # transaction's server connection: every statement is then parsed unnamed, each time.
        params["statement_cache_size"] = 0
    return {k: v for k, v in params.items() if v not in (None, "")}


def json_text(value: Any) -> str:
    """``value`` as the text a ``jsonb`` parameter takes (:func:`infra.jsonio.jsonb_text`: a
    NUL stored as U+FFFD, a lone surrogate as "?")."""
    return jsonio.jsonb_text(value)


async def _no_session_state(conn: asyncpg.Connection) -> None:
    """A connection going back to the pool needs no reset query: nothing here sets session
    state, listens or takes advisory locks (asyncpg still rolls back an unfinished
    transaction). The default reset is one more round trip per statement."""


async def _pool() -> asyncpg.Pool:
    """The running loop's pool, opened on first use (callers that arrive while it opens wait
    for the same opening)."""
    loop = asyncio.get_running_loop()
    opening = _opening.get(loop)
    if opening is None:
        pool = asyncpg.create_pool(
            # No floor: a pool that must keep one connection open retries (and logs a
            # traceback) every half second while the database is away.
            min_size=0,
            max_size=int(settings.INFRAI_ASYNC_DB_POOL_SIZE),
            # A connection idle this long is closed (the pool keeps min_size).
            max_inactive_connection_lifetime=60.0,
            timeout=10.0,
            reset=_no_session_state,
            **_connect_kwargs(),
        )
        opening = _opening[loop] = loop.create_task(_open(pool))
    try:
        return await asyncio.shield(opening)
    except BaseException:
        if opening.done():
            _opening.pop(loop, None)  # a failed opening is tried again by the next call
        raise


async def _open(pool: asyncpg.Pool) -> asyncpg.Pool:
    await pool
    _pools[asyncio.get_running_loop()] = pool
    return pool


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to PostgreSQL was lost or refused (not a statement's
    own error): the statement may be retried on another connection."""
    return outages.service_of(exc) == "PostgreSQL"


@asynccontextmanager
async def connection() -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection in autocommit: each statement is its own transaction.

    A block that fails on a lost connection drops that connection and expires the pool's idle
    ones too: what ends one backend (a restart, a failover, ``pg_terminate_backend`` over the
    database) has almost always ended all of them, and each would otherwise fail one more call
    before the pool learnt of it. Expired connections are replaced on their next acquisition.
    """
    pool = _pools.get(asyncio.get_running_loop()) or await _pool()
    try:
        async with pool.acquire() as conn:
            try:
                yield conn
            except BaseException as exc:
                if lost(exc):
                    conn.terminate()  # never back into the pool in an unknown state
                raise
    except BaseException as exc:
        if lost(exc):
            await pool.expire_connections()
        raise


@asynccontextmanager
async def fresh_connection(*, timeout_s: float = 5.0) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, opened now and closed after the block: where a statement must
    not draw another pooled connection that may be as dead as the last (a settlement's retry).
    Costs a connection set-up (a few ms on one host)."""
    conn = await asyncpg.connect(timeout=timeout_s, **_connect_kwargs())
    try:
        yield conn
    finally:
        try:
            await conn.close(timeout=1.0)
        except Exception:
            conn.terminate()


@asynccontextmanager
async def transaction() -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection inside one transaction: committed when the block ends, rolled back
    if it raises."""
    async with connection() as conn, conn.transaction():
        yield conn


async def fetchrow(
    conn: asyncpg.Connection, statement: Statement, params: Mapping[str, Any] | list[Any]
) -> asyncpg.Record | None:
    """Run ``statement`` with ``params`` on ``conn``; its first row, or None."""
    return await conn.fetchrow(statement.sql, *statement.args(params))


async def execute(
    conn: asyncpg.Connection, statement: Statement, params: Mapping[str, Any] | list[Any]
) -> None:
    """Run ``statement`` with ``params`` on ``conn`` for its effect."""
    await conn.execute(statement.sql, *statement.args(params))


# A statement whose commit need not wait for its WAL to reach the disk when its ``defer``
# parameter is true: the CTE is ``SET LOCAL synchronous_commit = off`` for the statement's
# transaction (with ``defer`` false it sets the current value again: no change, so a
# synchronous caller, inside its own transaction or not, keeps normal durability). The
# statement must read it (``FROM …, defer_flush``), or PostgreSQL never runs it. Row locks the
# statement took are then released as soon as it has run, instead of after the disk write; the
# commit is visible at once, and durable once PostgreSQL next flushes its WAL (within
# ``wal_writer_delay`` × 3, or at :func:`flush`, or at any later synchronous commit, whichever
# comes first: WAL is flushed in order).
DEFER_FLUSH_NAME = "defer_flush"
DEFER_FLUSH = (
    f"{DEFER_FLUSH_NAME} AS (SELECT set_config('synchronous_commit', CASE WHEN %(defer)s::boolean"
    " THEN 'off' ELSE current_setting('synchronous_commit') END, true))"
)
# One WAL record in a transaction of its own, committed synchronously: PostgreSQL flushes its WAL
# up to this commit, which covers every commit before it. (A transaction that writes nothing is
# never flushed, whatever synchronous_commit says; a logical-decoding message is the smallest
# write, touches no table and takes no lock.)
_FLUSH = "SELECT pg_logical_emit_message(true, 'infrai', 'flush')"


async def flush(conn: asyncpg.Connection) -> None:
    """Return once everything committed on ``conn`` so far (a :data:`DEFER_FLUSH` statement
    included) is on disk, as a synchronous commit would have: the server's
    ``synchronous_commit`` setting applies (off there, this does not wait either)."""
    # fetchval, not execute: asyncpg sends a statement without arguments through ``execute``
    # as a simple query, parsed and planned by PostgreSQL every time; this one is prepared.
    await conn.fetchval(_FLUSH)


async def close() -> None:
    """Close the running loop's pool (process shutdown; tests before they drop the database)."""
    loop = asyncio.get_running_loop()
    opening = _opening.pop(loop, None)
    pool = _pools.pop(loop, None)
    if pool is None and opening is not None and opening.done() and not opening.cancelled():
        pool = opening.result() if opening.exception() is None else None
    if pool is not None:
        try:
            # Bounded: a connection the database's going away left half-open would make a
            # graceful close wait forever (seen after a network cut); then it is dropped.
            await asyncio.wait_for(pool.close(), timeout=5.0)
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pool.terminate()
