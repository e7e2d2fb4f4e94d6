"""Holds and settlement: the contract of billing.services.holds, sequentially."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from billing.audit import audit_findings
from billing.errors import FundsLimit, InsufficientFunds
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, ProjectSpend, Wallet
from billing.selectors import ledger_page, wallet_summary
from billing.services import (
    HoldExists,
    HoldNotFound,
    hold_settle,
    holds_expire,
    holds_renew,
)
from billing.services.holds import _usd, month_start
from inference.errors import api_error
from money.usd import nanos_to_usd_str
from tests.billing.conftest import USD, open_hold, request_log

pytestmark = pytest.mark.django_db


def _wallet(t) -> Wallet:
    return Wallet.objects.get(organization=t.org)


def _spend(t) -> ProjectSpend:
    """The tenant's project's counter for this UTC month (what its budget is enforced against)."""
    return ProjectSpend.objects.get(project=t.project, month=month_start(timezone.now()))


def test_hold_reserves_and_settle_debits_actual_capped(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_a", 3 * USD)
    assert wallet_summary(organization_id=t.org.pk).available_nanos == 7 * USD
    assert hold_settle(request_id="req_a", actual_nanos=2 * USD) == 2 * USD
    open_hold(t, "req_b", USD)
    assert hold_settle(request_id="req_b", actual_nanos=5 * USD) == USD  # capped at the hold
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (7 * USD, 0)
    usage = LedgerEntry.objects.get(idempotency_key="usage:req_a")
    assert (usage.kind, usage.amount_nanos, usage.request_id) == (
        EntryKind.USAGE,
        -2 * USD,
        "req_a",
    )
    assert (usage.project_id, usage.api_key_id) == (t.project.pk, t.key.pk)
    assert _spend(t).used_nanos == 3 * USD
    assert not audit_findings().money


def test_insufficient_wallet_is_402_and_writes_nothing(make_tenant):
    t = make_tenant(balance_nanos=USD)
    with pytest.raises(InsufficientFunds) as err:
        open_hold(t, "req_x", USD + 1)
    assert err.value.limit is FundsLimit.WALLET
    assert (err.value.needed_nanos, err.value.available_nanos) == (USD + 1, USD)
    answer = api_error(err.value)
    assert answer is not None and answer.code == "insufficient_quota"
    assert answer.status == 402 and answer.headers()["x-should-retry"] == "false"
    assert "available balance is $1" in answer.message
    assert not Hold.objects.exists()
    assert _wallet(t).held_nanos == 0
    assert not ProjectSpend.objects.filter(held_nanos__gt=0).exists()
    open_hold(t, "req_y", USD)  # exactly the balance is fine


def test_no_wallet_is_insufficient_quota(make_tenant):
    t = make_tenant()
    Wallet.objects.filter(organization=t.org).delete()
    with pytest.raises(InsufficientFunds) as err:
        open_hold(t, "req_x", 1)
    assert err.value.limit is FundsLimit.WALLET and err.value.available_nanos == 0


def test_project_budget_counts_usage_and_open_holds(make_tenant):
    t = make_tenant(balance_nanos=100 * USD, budget_nanos=5 * USD)
    open_hold(t, "r1", 2 * USD, budget_nanos=5 * USD)
    hold_settle(request_id="r1", actual_nanos=2 * USD)  # used 2
    open_hold(t, "r2", 2 * USD, budget_nanos=5 * USD)  # held 2
    with pytest.raises(InsufficientFunds) as err:
        open_hold(t, "r3", USD + 1, budget_nanos=5 * USD)  # 2 + 2 + 1.000000001 > 5
    assert err.value.limit is FundsLimit.PROJECT_BUDGET and err.value.budget_nanos == 5 * USD
    assert err.value.available_nanos == USD  # 5 − 2 used − 2 held
    answer = api_error(err.value)
    assert answer is not None and answer.code == "project_budget_exceeded"
    assert "monthly budget of $5" in answer.message
    open_hold(t, "r4", USD, budget_nanos=5 * USD)  # exactly 5
    spend = ProjectSpend.objects.get(project=t.project)
    assert (spend.used_nanos, spend.held_nanos) == (2 * USD, 3 * USD)
    assert not audit_findings().money


def test_settle_twice_is_one_debit_and_same_result(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_a", 3 * USD)
    assert hold_settle(request_id="req_a", actual_nanos=USD) == USD
    assert hold_settle(request_id="req_a", actual_nanos=2 * USD) == USD
    assert LedgerEntry.objects.filter(kind=EntryKind.USAGE).count() == 1
    assert _wallet(t).balance_nanos == 9 * USD


def test_settle_zero_releases_without_entry(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_a", 3 * USD)
    assert hold_settle(request_id="req_a", actual_nanos=0) == 0
    assert not LedgerEntry.objects.filter(kind=EntryKind.USAGE).exists()
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (10 * USD, 0)
    assert Hold.objects.get().status == HoldStatus.SETTLED


def test_unknown_and_duplicate_request_ids(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    with pytest.raises(HoldNotFound):
        hold_settle(request_id="nope", actual_nanos=1)
    open_hold(t, "req_a", 1)
    with pytest.raises(HoldExists):
        open_hold(t, "req_a", 1)
    assert _wallet(t).held_nanos == 1


def test_expired_hold_is_released_visibly_and_late_settle_still_charges(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_dead", 4 * USD, ttl_s=1)
    open_hold(t, "req_alive", USD)
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=5)) == 1
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=5)) == 0
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (10 * USD, USD)
    entry = ledger_page(organization_id=t.org.pk)[0]
    assert (entry.kind, entry.amount_nanos) == (EntryKind.HOLD_EXPIRED, 0)
    assert "released after expiry" in entry.description
    # The sweeper's entry names the call it released.
    assert (entry.request_id, entry.project_id, entry.api_key_id) == (
        "req_dead",
        t.project.pk,
        t.key.pk,
    )
    assert hold_settle(request_id="req_dead", actual_nanos=USD) == USD
    assert hold_settle(request_id="req_dead", actual_nanos=USD) == USD
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (9 * USD, USD)
    assert _spend(t).held_nanos == USD
    assert not audit_findings().money


def test_billing_audit_command_reports_drift(make_tenant, capsys):
    t = make_tenant(balance_nanos=10 * USD)
    call_command("billing_audit")
    assert "drift=0" in capsys.readouterr().out
    Wallet.objects.filter(organization=t.org).update(balance_nanos=11 * USD)
    with pytest.raises(SystemExit) as exit_:
        call_command("billing_audit")
    assert exit_.value.code == 1
    assert "drift 1000000000" in capsys.readouterr().err


def test_a_refusal_carries_what_is_available_after_open_holds(make_tenant):
    t = make_tenant(balance_nanos=USD)
    open_hold(t, "req_a", 300_000_000)
    with pytest.raises(InsufficientFunds) as err:
        open_hold(t, "req_b", USD)
    assert err.value.limit is FundsLimit.WALLET
    assert err.value.available_nanos == 700_000_000


def test_renewal_keeps_live_holds_from_expiring(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "live", USD, ttl_s=1)
    open_hold(t, "dead", USD, ttl_s=1)
    open_hold(t, "done", USD, ttl_s=1)
    hold_settle(request_id="done", actual_nanos=USD)
    before = timezone.now()
    assert holds_renew(request_ids=["live", "done", "unknown"], ttl_s=600) == 1
    assert holds_renew(request_ids=[], ttl_s=600) == 0
    live = Hold.objects.get(request_id="live")
    assert live.expires_at >= before + dt.timedelta(seconds=600)
    assert Hold.objects.get(request_id="done").status == HoldStatus.SETTLED  # not reopened
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=5)) == 1
    assert Hold.objects.get(request_id="dead").status == HoldStatus.EXPIRED
    assert Hold.objects.get(request_id="live").status == HoldStatus.OPEN
    # An expired hold is not brought back by a renewal either.
    assert holds_renew(request_ids=["dead"], ttl_s=600) == 0
    assert Hold.objects.get(request_id="dead").status == HoldStatus.EXPIRED


def test_late_settlement_charges_at_most_what_is_available(make_tenant):
    """The expired hold's money was reserved again by another call: the late settlement
    takes only what is left, never driving the balance below what is held or below zero."""
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "slow", 4 * USD, ttl_s=1)
    assert holds_expire(now=timezone.now() + dt.timedelta(seconds=5)) == 1
    open_hold(t, "other", 8 * USD)  # possible only because the slow hold was released
    assert hold_settle(request_id="slow", actual_nanos=3 * USD) == 2 * USD
    assert hold_settle(request_id="slow", actual_nanos=3 * USD) == 2 * USD  # exactly once
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (8 * USD, 8 * USD)
    usage = LedgerEntry.objects.get(idempotency_key="usage:slow")
    assert usage.amount_nanos == -2 * USD
    assert "$1 of $3 uncollected" in usage.description
    assert Hold.objects.get(request_id="slow").captured_nanos == 2 * USD
    assert _spend(t).used_nanos == 2 * USD
    # The other call settles in full: its reservation was never touched.
    assert hold_settle(request_id="other", actual_nanos=8 * USD) == 8 * USD
    assert _wallet(t).balance_nanos == 0
    assert not audit_findings().money


def test_late_settlement_with_nothing_available_writes_a_zero_entry(make_tenant):
    t = make_tenant(balance_nanos=5 * USD)
    open_hold(t, "slow", 5 * USD, ttl_s=1)
    holds_expire(now=timezone.now() + dt.timedelta(seconds=5))
    open_hold(t, "other", 5 * USD)
    assert hold_settle(request_id="slow", actual_nanos=USD, description="chat m") == 0
    w = _wallet(t)
    assert (w.balance_nanos, w.held_nanos) == (5 * USD, 5 * USD)
    usage = LedgerEntry.objects.get(idempotency_key="usage:slow")
    assert usage.amount_nanos == 0
    assert usage.description.startswith("chat m; hold had expired: $1 of $1 uncollected")
    assert not audit_findings().money


def test_settle_inside_the_callers_transaction_with_the_request_log(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_a", 3 * USD)
    with transaction.atomic():
        request_log(t, "req_a", 2 * USD).save()
        assert hold_settle(request_id="req_a", actual_nanos=2 * USD) == 2 * USD
    assert _wallet(t).balance_nanos == 8 * USD
    with transaction.atomic():  # again: still exactly once
        assert hold_settle(request_id="req_a", actual_nanos=2 * USD) == 2 * USD
    assert LedgerEntry.objects.filter(kind=EntryKind.USAGE).count() == 1
    assert audit_findings().drift == []  # the request log and its entry agree


def test_the_statements_write_amounts_in_usd_as_money_usd_does():
    """The expiry's and the late settlement's descriptions are written by SQL; its rendering of
    nano-USD is :func:`money.usd.nanos_to_usd_str`'s, digit for digit."""
    rng = random.Random(7)
    values = [0, 1, 9, 10, 100, 123_456_789, USD - 1, USD, USD + 1, 2_500_000_000, 2**63 - 1]
    values += [rng.randrange(10 ** rng.randrange(1, 19)) for _ in range(500)]
    with connection.cursor() as cur:
        cur.execute(f"SELECT v, {_usd('v')} FROM unnest(%s::bigint[]) AS t(v)", [values])
        rendered = dict(cur.fetchall())
    assert rendered == {v: nanos_to_usd_str(v) for v in values}
