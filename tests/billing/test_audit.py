"""``billing_audit``: every check finds the fault it is for, and clean books stay clean."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import tasks
from billing.audit import EXPIRY_GRACE_S, audit_findings
from billing.models import EntryKind, Hold, LedgerEntry, Wallet
from billing.services import hold_settle, holds_expire
from inference.models import RequestLog
from tests.billing.conftest import USD, open_hold, request_log

pytestmark = pytest.mark.django_db


def _call(t, rid: str, cost: int, *, hold: int = USD) -> None:
    """A whole billed call as the request path makes it: hold, then log + settle together."""
    open_hold(t, rid, hold)
    with transaction.atomic():
        request_log(t, rid, min(cost, hold)).save()
        hold_settle(request_id=rid, actual_nanos=cost)


def _checks(report) -> list[str]:
    return sorted(f.check for f in report.findings)


def test_clean_books_have_no_findings(make_tenant, capsys):
    t = make_tenant(balance_nanos=10 * USD)
    _call(t, "ok-1", 300_000_000)
    _call(t, "ok-2", 0)  # free call: no entry, no finding
    _call(t, "capped", 2 * USD, hold=USD)
    open_hold(t, "in-flight", USD)
    open_hold(t, "just-expired", USD, ttl_s=1)
    Hold.objects.filter(request_id="just-expired").update(
        expires_at=timezone.now() - dt.timedelta(seconds=EXPIRY_GRACE_S // 2)
    )
    report = audit_findings()
    assert report.drift == []
    assert (report.wallets, report.open_holds) == (1, 2)
    call_command("billing_audit")
    assert "drift=0" in capsys.readouterr().out


def test_each_check_finds_its_fault_and_the_command_exits_1(make_tenant, capsys):
    t = make_tenant(balance_nanos=10 * USD)
    # negative cost in a request log
    request_log(t, "neg", -5).save()
    # a request log whose call was never charged, and one charged a different amount
    request_log(t, "free-ride", 700).save()
    _call(t, "differs", 500)
    RequestLog.objects.filter(request_id="differs").update(cost_nanos=600)
    # a usage entry with no request log
    open_hold(t, "no-log", USD)
    hold_settle(request_id="no-log", actual_nanos=100)
    # a settled hold whose capture disagrees with its entry
    _call(t, "capture", 200)
    Hold.objects.filter(request_id="capture").update(captured_nanos=250)
    # a hold stuck open long past its expiry
    open_hold(t, "stuck", USD)
    Hold.objects.filter(request_id="stuck").update(
        expires_at=timezone.now() - dt.timedelta(seconds=EXPIRY_GRACE_S + 60)
    )
    report = audit_findings()
    assert _checks(report) == [
        "capture",
        "entry_without_log",
        "log_without_entry",
        "log_without_entry",
        "negative_cost",
        "stuck_hold",
    ]
    lines = "\n".join(report.drift)
    assert "request free-ride: cost 700 but no usage entry" in lines
    assert "request differs: cost 600 != usage entry 500" in lines
    assert "usage entry of request 'no-log'" in lines
    assert "hold capture: captured 250 != usage entry 200" in lines
    assert "request neg: cost -5" in lines
    assert "hold stuck" in lines
    assert report.money == [f for f in report.drift if f.startswith(("capture", "stuck_hold"))]
    with pytest.raises(SystemExit) as exit_:
        call_command("billing_audit")
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.count("DRIFT ") == 6


def test_an_inserted_entry_breaks_the_chain_and_the_sums(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    wallet = Wallet.objects.get(organization=t.org)
    bogus = LedgerEntry.objects.create(
        wallet=wallet,
        kind=EntryKind.CREDIT,
        amount_nanos=5,
        balance_after_nanos=10 * USD,  # should be 10 USD + 5
        idempotency_key="bogus",
    )
    report = audit_findings()
    assert _checks(report) == ["balance", "chain"]
    assert f"entry {bogus.pk}: balance_after {10 * USD} != previous {10 * USD} + amount 5" in (
        "\n".join(report.drift)
    )


def test_an_edited_entry_is_found_by_the_chain_alone(make_tenant):
    """The issue's case: a row edited so that the sums still agree but the chain does not.
    Only a superuser can do it (the trigger refuses everyone else): replica mode skips
    triggers for this transaction."""
    t = make_tenant(balance_nanos=10 * USD)
    _call(t, "a", USD)
    _call(t, "b", USD)
    middle = LedgerEntry.objects.get(request_id="a")
    with connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute(
            "UPDATE billing_ledgerentry SET balance_after_nanos = balance_after_nanos + 7"
            " WHERE id = %s",
            [middle.pk],
        )
        cur.execute("SET LOCAL session_replication_role = DEFAULT")
    report = audit_findings()
    assert _checks(report) == ["chain", "chain"]  # the edited entry and the one after it
    assert all(f"wallet {middle.wallet_id}" in line for line in report.drift)


def test_late_partial_settlement_is_not_a_finding_but_its_hold_is_checked(make_tenant):
    t = make_tenant(balance_nanos=5 * USD)
    open_hold(t, "slow", 4 * USD, ttl_s=1)
    holds_expire(now=timezone.now() + dt.timedelta(seconds=5))
    open_hold(t, "other", 4 * USD)
    with transaction.atomic():
        request_log(t, "slow", 3 * USD).save()  # the call cost 3; only 1 was left to collect
        assert hold_settle(request_id="slow", actual_nanos=3 * USD) == USD
    with transaction.atomic():
        request_log(t, "other", 2 * USD).save()
        hold_settle(request_id="other", actual_nanos=2 * USD)
    assert audit_findings().drift == []
    # ... but the same shortfall without an expired hold behind it is a finding.
    _call(t, "normal", 500)
    RequestLog.objects.filter(request_id="normal").update(cost_nanos=900)
    assert _checks(audit_findings()) == ["log_without_entry"]


def test_queries_do_not_grow_with_the_number_of_rows(make_tenant):
    t = make_tenant(balance_nanos=10 * USD)
    _call(t, "one", 100)
    with CaptureQueriesContext(connection) as few:
        audit_findings()
    for n in range(6):
        other = make_tenant(balance_nanos=USD)
        _call(other, f"more-{n}", 100)
        _call(t, f"again-{n}", 100)
    with CaptureQueriesContext(connection) as many:
        report = audit_findings()
    assert report.drift == [] and report.wallets == 7
    assert len(many.captured_queries) == len(few.captured_queries) <= 15


def test_the_beat_task_logs_each_finding_at_error(make_tenant, caplog):
    t = make_tenant(balance_nanos=USD)
    request_log(t, "free-ride", 700).save()
    request_log(t, "neg", -1).save()
    with caplog.at_level(logging.ERROR, logger="billing.tasks"):
        assert tasks.audit() == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all(m.startswith("billing audit: ") for m in errors)
    assert tasks.BEAT_SCHEDULE["billing.audit"]["task"] == "billing.audit"


def test_calls_past_their_retention_lose_their_log_without_a_finding(
    make_tenant, settings, monkeypatch
):
    """Retention deletes request-log rows (``inference.partitions``) and never ledger entries:
    an entry older than its organization's retention has no log by design; a younger one
    without its log is still a finding."""
    settings.INFRAI_REQUEST_LOG_RETENTION_DAYS = 400
    t = make_tenant(balance_nanos=10 * USD)
    t.org.request_log_retention_days = 10
    t.org.save(update_fields=["request_log_retention_days"])
    _call(t, "pruned", 300)
    RequestLog.objects.filter(request_id="pruned").delete()
    assert _checks(audit_findings()) == ["entry_without_log"]  # within its 10 days
    later = timezone.now() + dt.timedelta(days=12)
    monkeypatch.setattr("billing.audit.timezone.now", lambda: later)
    assert audit_findings().findings == []  # past them: deleted by design
    _call(t, "lost", 300)  # written "now", 12 days before the audit's clock: within 400 days
    t.org.request_log_retention_days = None
    t.org.save(update_fields=["request_log_retention_days"])
    RequestLog.objects.filter(request_id="lost").delete()
    assert _checks(audit_findings()) == ["entry_without_log", "entry_without_log"]
