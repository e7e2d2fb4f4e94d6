"""The ``/v1`` hot path stays lean: what one chat call asks of PostgreSQL and Redis is counted,
and its money statements run on the event loop (``config.adb``) with the same guarantees as
the ORM path they replace. No timings: counts and ledger facts only.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import asyncpg
import psycopg
import pytest
import redis
from django.db import connection

from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.services import hold_open
from billing.services.holds import hold_expire
from config import live, resp
from inference import pipeline
from inference.models import RequestLog, RequestStatus

pytestmark = [
    pytest.mark.usefixtures("fake_catalog"),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the loop path is PostgreSQL's (DATABASE_URL)"
    ),
]
MESSAGES = [{"role": "user", "content": "count me"}]
# asyncpg's methods that send a statement (BEGIN and COMMIT go through ``execute``).
_ASYNCPG_STATEMENTS = ("execute", "executemany", "fetch", "fetchrow", "fetchval")


def _wait_for_background(seconds: float = 10.0) -> None:
    """Let the call's after-response work (circuit success, live push) finish."""
    deadline = time.monotonic() + seconds
    while pipeline._background and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def count_round_trips(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """Count, from now on in this process (the live server runs in it), the statements sent to
    PostgreSQL (``config.adb``'s asyncpg and the ORM's psycopg) and the round trips to Redis."""
    seen: Counter[str] = Counter()

    def counting(kind: str, original: Any) -> Any:
        if asyncio.iscoroutinefunction(original):

            async def acount(self: Any, *args: Any, **kwargs: Any) -> Any:
                seen[kind] += 1
                return await original(self, *args, **kwargs)

            return acount

        def count(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen[kind] += 1
            return original(self, *args, **kwargs)

        return count

    patches = [
        *((asyncpg.Connection, name, "postgresql") for name in _ASYNCPG_STATEMENTS),
        (psycopg.AsyncCursor, "execute", "postgresql"),
        (psycopg.Cursor, "execute", "postgresql"),
        (resp.Connection, "execute", "redis"),
        (redis.connection.AbstractConnection, "send_packed_command", "redis"),
    ]
    for owner, name, kind in patches:
        monkeypatch.setattr(owner, name, counting(kind, getattr(owner, name)))

    def reset() -> Counter[str]:
        snapshot = Counter(seen)
        seen.clear()
        return snapshot

    return reset


def test_one_chat_call_costs_three_statements_and_one_redis_round_trip(
    issue_key, client_for, count_round_trips, settings, monkeypatch
):
    """Steady state: the hold is one statement, the request log and the settlement one more,
    then the wait for the disk (``config.adb.flush``: both commits are deferred so that the
    wallet row is not locked while PostgreSQL writes to disk). Redis sees one round trip, the
    rate-limit counters with the key's confirmation (the key itself comes from the process's
    memory: accounts.auth); the live push goes only to
    organizations with a page open (none here). Beside these, a process re-reads the catalog
    version, vendor health and the page count at most once per their memo time (about a
    second; made long here so the count is exact). If this grows, the hot path grew: look at
    what was added before changing the numbers."""
    settings.INFRAI_HEALTH_MEMO_S = 600
    settings.INFRAI_CATALOG_CHECK_S = 600
    monkeypatch.setattr(live, "WATCH_MEMO_S", 600.0)
    client = client_for(issue_key(credit_usd="1"))
    for _ in range(3):
        client.chat.completions.create(model="test-large", messages=MESSAGES)
    _wait_for_background()
    count_round_trips()
    resp = client.chat.completions.create(model="test-large", messages=MESSAGES)
    _wait_for_background()
    counts = count_round_trips()
    assert resp.choices[0].message.content == "Echo: count me"
    assert counts["postgresql"] == 3, counts
    assert counts["redis"] == 1, counts
    log = RequestLog.objects.get(request_id=resp.infrai["request_id"])
    entry = LedgerEntry.objects.get(request_id=log.request_id, kind=EntryKind.USAGE)
    assert log.cost_nanos == -entry.amount_nanos == resp.infrai["cost_nanos"] > 0


def _held_call(org_key: str, request_id: str, amount: int) -> RequestLog:
    """A hold of ``amount`` for ``request_id`` and the log row its call would write."""
    from accounts.auth import authenticate

    key = asyncio.run(authenticate(f"Bearer {org_key}"))
    hold_open(
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.key_id,
        request_id=request_id,
        amount_nanos=amount,
    )
    return RequestLog(
        request_id=request_id,
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.key_id,
        endpoint="chat.completions",
        model="test-large",
        vendor="primary",
        status=RequestStatus.OK,
        http_status=200,
        input_tokens=3,
        output_tokens=4,
        cost_nanos=700,
        routing={"mode": "pinned", "note": "text with a NUL \x00 in it"},
    )


def _settle_on_loop(row: RequestLog, cost: int) -> bool:
    async def run() -> bool:
        try:
            return await pipeline._record_and_settle_on_loop(row, True, cost)
        finally:
            await pipeline.close_clients()

    return asyncio.run(run())


def test_the_log_row_and_the_settlement_commit_together_on_the_loop(issue_key, transactional_db):
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_ok", 10_000)
    assert _settle_on_loop(row, 700) is True
    stored = RequestLog.objects.get(request_id="req_loop_ok")
    assert stored.routing == {"mode": "pinned", "note": "text with a NUL  in it"}
    assert Hold.objects.get(request_id="req_loop_ok").status == HoldStatus.SETTLED
    entry = LedgerEntry.objects.get(request_id="req_loop_ok", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    wallet = Wallet.objects.get(pk=entry.wallet_id)
    assert (wallet.balance_nanos, wallet.held_nanos) == (1_000_000_000 - 700, 0)


def test_a_row_that_cannot_be_written_leaves_nothing_half_done(issue_key, transactional_db):
    """A failing INSERT (a duplicate request id) fails the whole statement: the hold is still
    open and no usage entry exists, so the ORM path can settle it alone."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_dup", 10_000)
    RequestLog.objects.create(
        request_id="req_loop_dup",
        organization_id=row.organization_id,
        endpoint="chat.completions",
        status=RequestStatus.OK,
        http_status=200,
    )
    assert _settle_on_loop(row, 700) is False
    assert Hold.objects.get(request_id="req_loop_dup").status == HoldStatus.OPEN
    assert not LedgerEntry.objects.filter(request_id="req_loop_dup", kind=EntryKind.USAGE)


def test_an_expired_hold_is_settled_late_and_capped(issue_key, transactional_db):
    """A hold the sweeper expired (a process stalled past the TTL): the row is written and the
    late settlement charges what the call cost, within what the wallet has."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_late", 10_000)
    assert hold_expire(hold_id=Hold.objects.get(request_id="req_loop_late").pk)
    assert _settle_on_loop(row, 700) is True
    assert RequestLog.objects.filter(request_id="req_loop_late").exists()
    entries = LedgerEntry.objects.filter(request_id="req_loop_late")
    assert {e.kind: e.amount_nanos for e in entries} == {
        EntryKind.HOLD_EXPIRED: 0,
        EntryKind.USAGE: -700,
    }
    assert Wallet.objects.get(pk=entries[0].wallet_id).held_nanos == 0


def test_a_settlement_on_the_loop_that_crosses_the_threshold_asks_for_a_recharge(
    issue_key, transactional_db, monkeypatch
):
    """The loop path reports an auto-recharge that became due, after its statement committed,
    exactly as the ORM path does (the worker re-checks the wallet under its lock)."""
    from billing.services import holds

    asked: list[int] = []
    monkeypatch.setattr(holds, "auto_recharge_enqueue", asked.append)
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_recharge", 10_000)
    wallet = Wallet.objects.get(organization_id=row.organization_id)
    Wallet.objects.filter(pk=wallet.pk).update(
        auto_recharge_enabled=True,
        auto_recharge_armed=True,
        auto_recharge_threshold_nanos=2_000_000_000,  # above the balance: due on any charge
    )

    async def settle_and_wait() -> bool:
        try:
            done = await pipeline._record_and_settle_on_loop(row, True, 700)
            await asyncio.gather(*pipeline._background)
            return done
        finally:
            await pipeline.close_clients()

    assert asyncio.run(settle_and_wait()) is True
    assert asked == [wallet.pk]


def test_a_flush_that_fails_after_the_settlement_committed_reports_it_settled(
    issue_key, transactional_db, monkeypatch
):
    """Attack: the database drops the connection between the settlement's (deferred) commit
    and the wait for the disk. The settlement stands and is reported as done, so nothing
    settles it again or writes a second log row."""
    from config import adb

    async def broken_flush(conn: asyncpg.Connection) -> None:
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")

    monkeypatch.setattr(adb, "flush", broken_flush)
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_flush", 10_000)
    assert _settle_on_loop(row, 700) is True
    assert RequestLog.objects.filter(request_id="req_loop_flush").count() == 1
    assert Hold.objects.get(request_id="req_loop_flush").status == HoldStatus.SETTLED
    entry = LedgerEntry.objects.get(request_id="req_loop_flush", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    assert Wallet.objects.get(pk=entry.wallet_id).held_nanos == 0
