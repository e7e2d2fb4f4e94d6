"""``hold_settle`` in autocommit and inside the caller's transaction, with real commits.

Transactional tests (no test-wide transaction around them), so autocommit is real autocommit,
a rollback of the caller's block really undoes the settlement, and the async twins (the event
loop's own connections) see committed rows.
"""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from billing.services import aholds_renew, hold_settle
from inference.models import RequestLog
from infra import adb
from tests.billing.conftest import USD, open_hold, request_log

pytestmark = pytest.mark.django_db(transaction=True)


class _Boom(Exception):
    pass


def test_autocommit_settle_is_one_statement(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "auto", USD)
    assert not connection.in_atomic_block
    with CaptureQueriesContext(connection) as queries:
        assert hold_settle(request_id="auto", actual_nanos=300) == 300
    assert len(queries.captured_queries) == 1  # no BEGIN/COMMIT round trips
    assert Wallet.objects.get(organization=t.org).balance_nanos == 10 * USD - 300


def test_log_and_settlement_commit_together(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "together", USD)
    with transaction.atomic():
        request_log(t, "together", 400).save()
        assert hold_settle(request_id="together", actual_nanos=400) == 400
    assert RequestLog.objects.filter(request_id="together").exists()
    assert LedgerEntry.objects.get(kind=EntryKind.USAGE).amount_nanos == -400
    assert audit_findings().drift == []


def test_a_rolled_back_callers_block_leaves_the_hold_open_to_settle_again(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "undone", USD)
    with pytest.raises(_Boom), transaction.atomic():
        request_log(t, "undone", 400).save()
        assert hold_settle(request_id="undone", actual_nanos=400) == 400
        raise _Boom
    assert not RequestLog.objects.exists()
    assert not LedgerEntry.objects.filter(kind=EntryKind.USAGE).exists()
    assert Hold.objects.get(request_id="undone").status == HoldStatus.OPEN
    w = Wallet.objects.get(organization=t.org)
    assert (w.balance_nanos, w.held_nanos) == (10 * USD, USD)
    # Settled again (here without the log): exactly one charge.
    assert hold_settle(request_id="undone", actual_nanos=400) == 400
    assert hold_settle(request_id="undone", actual_nanos=400) == 400
    assert LedgerEntry.objects.filter(kind=EntryKind.USAGE).count() == 1
    assert not audit_findings().money


def test_async_renewal_commits_on_the_loop(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "r1", USD)
    open_hold(t, "r2", USD)
    hold_settle(request_id="r2", actual_nanos=0)
    before = Hold.objects.get(request_id="r1").expires_at

    async def renew() -> int:
        try:
            return await aholds_renew(request_ids=["r1", "r2"], ttl_s=3600)
        finally:
            await adb.close()

    assert asyncio.run(renew()) == 1
    assert Hold.objects.get(request_id="r1").expires_at > before
