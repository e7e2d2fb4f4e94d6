"""The ``/v1`` hot path stays lean: what one chat call asks of PostgreSQL and Redis is counted,
and its money statements run on the event loop (``infra.adb``) with the guarantees of
``billing.services.holds``. No timings: counts and ledger facts only.
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

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.services import hold_open
from billing.services.holds import hold_expire
from inference import settlement
from inference.models import RequestLog, RequestStatus
from infra import background, live, resp

pytestmark = pytest.mark.usefixtures("fake_catalog")
MESSAGES = [{"role": "user", "content": "count me"}]
# asyncpg's methods that send a statement (BEGIN and COMMIT go through ``execute``).
_ASYNCPG_STATEMENTS = ("execute", "executemany", "fetch", "fetchrow", "fetchval")


def _wait_for_background(seconds: float = 10.0) -> None:
    """Let the call's after-response work (circuit success, live push) finish."""
    deadline = time.monotonic() + seconds
    while background.pending() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def count_round_trips(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """Count, from now on in this process (the live server runs in it), the statements sent to
    PostgreSQL (``infra.adb``'s asyncpg and the ORM's psycopg) and the round trips to Redis."""
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
    then the wait for the disk (``infra.adb.flush``: both commits are deferred so that the
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


def _held_row_copy(row: RequestLog) -> RequestLog:
    return RequestLog(**{f.attname: getattr(row, f.attname) for f in RequestLog._meta.fields})


def _settle_on_loop(row: RequestLog, cost: int) -> None:
    async def run() -> None:
        try:
            await settlement._record_and_settle_on_loop(row, True, cost)
        finally:
            await settlement.close_clients()

    asyncio.run(run())


def test_the_log_row_and_the_settlement_commit_together_on_the_loop(issue_key, transactional_db):
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_ok", 10_000)
    _settle_on_loop(row, 700)
    stored = RequestLog.objects.get(request_id="req_loop_ok")
    assert stored.routing == {"mode": "pinned", "note": "text with a NUL  in it"}
    assert Hold.objects.get(request_id="req_loop_ok").status == HoldStatus.SETTLED
    entry = LedgerEntry.objects.get(request_id="req_loop_ok", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    wallet = Wallet.objects.get(pk=entry.wallet_id)
    assert (wallet.balance_nanos, wallet.held_nanos) == (1_000_000_000 - 700, 0)


def test_a_row_the_database_refuses_is_settled_alone_with_a_minimal_row(
    issue_key, transactional_db, monkeypatch
):
    """The row's INSERT fails inside the settlement's statement (a NUL the cleaning would have
    removed reaches a text column, which PostgreSQL refuses): that statement writes nothing,
    then the hold is settled alone and a minimal ``log_write_failed`` row written — charged
    once, logged once."""
    monkeypatch.setattr(settlement, "_clean_row", lambda row: None)
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_refused", 10_000)
    row.prompt = "a prompt with a NUL \x00 in it"
    _settle_on_loop(row, 700)
    stored = RequestLog.objects.get(request_id="req_loop_refused")
    assert (stored.error_code, stored.routing, stored.cost_nanos) == ("log_write_failed", {}, 700)
    entry = LedgerEntry.objects.get(request_id="req_loop_refused", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    wallet = Wallet.objects.get(pk=entry.wallet_id)
    assert (wallet.balance_nanos, wallet.held_nanos) == (1_000_000_000 - 700, 0)


def test_a_row_already_written_is_kept_and_the_hold_settled_once(issue_key, transactional_db):
    """A settlement repeated after its answer was lost (a reset after the commit) finds its row
    and its hold: nothing is written twice, nothing raises."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_dup", 10_000)
    _settle_on_loop(row, 700)
    again = _held_row_copy(row)
    again.error_code = "second_attempt"
    _settle_on_loop(again, 700)
    stored = RequestLog.objects.get(request_id="req_loop_dup")
    assert stored.error_code == ""  # the first attempt's row
    entry = LedgerEntry.objects.get(request_id="req_loop_dup", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700


def test_a_late_settlement_replaces_the_abandoned_row_the_sweeper_wrote(
    issue_key, transactional_db
):
    """The sweeper logged the call ``abandoned`` while its settlement waited in a journal: the
    replayed settlement's row takes its place."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_abandoned", 10_000)
    assert hold_expire(hold_id=Hold.objects.get(request_id="req_loop_abandoned").pk)
    RequestLog.objects.create(
        request_id="req_loop_abandoned",
        organization_id=row.organization_id,
        endpoint="unknown",
        status=RequestStatus.ABANDONED,
        http_status=0,
        error_code="settlement_lost",
    )
    _settle_on_loop(row, 700)
    stored = RequestLog.objects.get(request_id="req_loop_abandoned")
    assert (stored.status, stored.endpoint, stored.cost_nanos) == (
        RequestStatus.OK,
        row.endpoint,
        700,
    )
    entry = LedgerEntry.objects.get(request_id="req_loop_abandoned", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700


def test_a_row_that_cannot_be_written_at_all_still_settles_the_hold(issue_key, transactional_db):
    """A value PostgreSQL refuses even in the minimal row (an endpoint past its column): the
    money comes first — the hold is settled alone, exactly once — and the audit reports the
    entry without its log."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_unwritable", 10_000)
    row.endpoint = "x" * 41
    _settle_on_loop(row, 700)
    assert not RequestLog.objects.filter(request_id="req_loop_unwritable").exists()
    assert Hold.objects.get(request_id="req_loop_unwritable").status == HoldStatus.SETTLED
    entry = LedgerEntry.objects.get(request_id="req_loop_unwritable", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    assert [f.check for f in audit_findings().findings] == ["entry_without_log"]


def test_an_expired_hold_is_settled_late_and_capped(issue_key, transactional_db):
    """A hold the sweeper expired (a process stalled past the TTL): the row is written and the
    late settlement charges what the call cost, within what the wallet has."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_late", 10_000)
    assert hold_expire(hold_id=Hold.objects.get(request_id="req_loop_late").pk)
    _settle_on_loop(row, 700)
    assert RequestLog.objects.filter(request_id="req_loop_late").exists()
    entries = LedgerEntry.objects.filter(request_id="req_loop_late")
    assert {e.kind: e.amount_nanos for e in entries} == {
        EntryKind.HOLD_EXPIRED: 0,
        EntryKind.USAGE: -700,
    }
    assert Wallet.objects.get(pk=entries[0].wallet_id).held_nanos == 0


def test_a_late_settlement_on_the_loop_takes_only_what_is_available(issue_key, transactional_db):
    """The expired hold's money was reserved again by another call: the late settlement on the
    loop (``asettle``, with the row's INSERT) charges what is left and notes the rest."""
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_short", 10_000)
    assert hold_expire(hold_id=Hold.objects.get(request_id="req_loop_short").pk)
    hold_open(
        organization_id=row.organization_id,
        project_id=row.project_id,
        api_key_id=row.api_key_id,
        request_id="req_loop_other",
        amount_nanos=1_000_000_000 - 300,  # leaves 300 available
    )
    _settle_on_loop(row, 700)
    assert RequestLog.objects.get(request_id="req_loop_short").cost_nanos == 700
    usage = LedgerEntry.objects.get(request_id="req_loop_short", kind=EntryKind.USAGE)
    assert usage.amount_nanos == -300
    assert usage.description == (
        "chat.completions test-large; hold had expired: $0.0000004 of $0.0000007 uncollected"
        " ($0.0000003 available)"
    )
    assert Hold.objects.get(request_id="req_loop_short").captured_nanos == 300
    wallet = Wallet.objects.get(pk=usage.wallet_id)
    assert (wallet.balance_nanos, wallet.held_nanos) == (1_000_000_000 - 300, 1_000_000_000 - 300)
    assert audit_findings().money == []


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

    async def settle_and_wait() -> None:
        try:
            await settlement._record_and_settle_on_loop(row, True, 700)
            await asyncio.gather(*background.pending(asyncio.get_running_loop()))
        finally:
            await settlement.close_clients()

    asyncio.run(settle_and_wait())
    assert asked == [wallet.pk]


def test_a_flush_that_fails_after_the_settlement_committed_reports_it_settled(
    issue_key, transactional_db, monkeypatch
):
    """Attack: the database drops the connection between the settlement's (deferred) commit
    and the wait for the disk. The settlement stands and is reported as done, so nothing
    settles it again or writes a second log row."""
    from infra import adb

    async def broken_flush(conn: asyncpg.Connection) -> None:
        raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")

    monkeypatch.setattr(adb, "flush", broken_flush)
    key = issue_key(credit_usd="1")
    row = _held_call(key, "req_loop_flush", 10_000)
    _settle_on_loop(row, 700)
    assert RequestLog.objects.filter(request_id="req_loop_flush").count() == 1
    assert Hold.objects.get(request_id="req_loop_flush").status == HoldStatus.SETTLED
    entry = LedgerEntry.objects.get(request_id="req_loop_flush", kind=EntryKind.USAGE)
    assert entry.amount_nanos == -700
    assert Wallet.objects.get(pk=entry.wallet_id).held_nanos == 0
