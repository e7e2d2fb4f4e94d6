"""``infra.adb``'s deferred commits: a statement that reads ``DEFER_FLUSH`` commits without
waiting for the disk, only for its own transaction, and ``flush`` waits for the disk after it.
Real PostgreSQL; no timings."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection, transaction

from infra import adb

pytestmark = pytest.mark.django_db(transaction=True)

_WRITE_SQL = (
    f"WITH {adb.DEFER_FLUSH} INSERT INTO adb_probe (n) SELECT %(n)s::int"
    f" FROM {adb.DEFER_FLUSH_NAME} RETURNING pg_current_wal_insert_lsn()::text"
)
_WRITE = adb.Statement.compile(_WRITE_SQL)


@pytest.fixture
def probe_table():
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE adb_probe (n int)")
    yield
    with connection.cursor() as cur:
        cur.execute("DROP TABLE adb_probe")


def _run(coro_fn):
    async def main():
        try:
            return await coro_fn()
        finally:
            await adb.close()

    return asyncio.run(main())


def test_a_deferred_commit_is_visible_at_once_and_leaves_the_session_synchronous(probe_table):
    async def go():
        async with adb.connection() as conn:
            await adb.fetchrow(conn, _WRITE, {"n": 7, "defer": True})
            setting = await conn.fetchval("SHOW synchronous_commit")
            async with adb.connection() as other:
                seen = await other.fetchval("SELECT count(*) FROM adb_probe WHERE n = 7")
            return setting, seen

    setting, seen = _run(go)
    assert seen == 1  # committed: another connection reads it
    assert setting == "on"  # SET LOCAL: the pooled connection is not left asynchronous


def test_flush_puts_everything_committed_before_it_on_disk(probe_table):
    """After ``flush`` the WAL is flushed past the deferred commits made before it."""

    async def go():
        async with adb.connection() as conn:
            written = []
            for n in range(20):
                row = await adb.fetchrow(conn, _WRITE, {"n": n, "defer": True})
                written.append(row[0])
            await adb.flush(conn)
            flushed = await conn.fetchval(
                "SELECT pg_current_wal_flush_lsn() >= max(lsn::pg_lsn)"
                " FROM unnest($1::text[]) AS lsn",
                written,
            )
            return flushed

    assert _run(go) is True


def test_without_defer_the_statement_keeps_the_callers_durability(probe_table):
    """The same text run by a synchronous caller (``defer`` false) inside its own transaction
    leaves ``synchronous_commit`` as it was for that transaction."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_WRITE_SQL, {"n": 8, "defer": False})
        cur.execute("SHOW synchronous_commit")
        assert cur.fetchone()[0] == "on"
        cur.execute(_WRITE_SQL, {"n": 9, "defer": True})
        cur.execute("SHOW synchronous_commit")
        assert cur.fetchone()[0] == "off"  # SET LOCAL: only until this transaction ends
    with connection.cursor() as cur:
        cur.execute("SHOW synchronous_commit")
        assert cur.fetchone()[0] == "on"
