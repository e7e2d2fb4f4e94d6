"""``billing_audit``: every check finds the fault it is for, and clean books stay clean — in
the full audit and in the windowed one the beat task runs (``audit_findings(since=…)``), which
must find the same faults when they were written in its window."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import journal, tasks
from billing.audit import EXPIRY_GRACE_S, audit_findings, window_margin
from billing.models import EntryKind, Hold, LedgerEntry, ProjectSpend, Wallet
from billing.services import hold_settle, holds_expire, process_seen
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


#: How long before the window the books' history is written (``_age``): past every margin.
OLD = dt.timedelta(hours=3)


def _age(delta: dt.timedelta = OLD) -> dt.datetime:
    """Move everything in the books ``delta`` into the past, as if written then, and return
    now: a windowed audit since then reads none of it but as its anchors. The ledger's trigger
    refuses the update: replica mode skips it for this transaction (a superuser's)."""
    with connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("UPDATE billing_ledgerentry SET created_at = created_at - %s", [delta])
        cur.execute(
            "UPDATE billing_hold SET created_at = created_at - %s, "
            "expires_at = expires_at - %s, closed_at = closed_at - %s",
            [delta, delta, delta],
        )
        cur.execute("UPDATE inference_requestlog SET created_at = created_at - %s", [delta])
        cur.execute("SET LOCAL session_replication_role = DEFAULT")
    return timezone.now()


def _history(t) -> None:
    """Clean calls of ``t``: the history that :func:`_age` then moves before the window (what
    the window's anchors are)."""
    _call(t, "old-1", 300_000_000)
    _call(t, "old-2", 0)
    _call(t, "old-3", 2 * USD, hold=USD)


#: The two audits: the full one, and the window of what was written since ``since``.
AUDITS = {
    "full": lambda since: audit_findings(),
    "window": lambda since: audit_findings(since=since),
}
both = pytest.mark.parametrize("audit", list(AUDITS.values()), ids=list(AUDITS))


@both
def test_clean_books_have_no_findings(make_tenant, capsys, audit):
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    since = _age()
    _call(t, "ok-1", 300_000_000)
    _call(t, "ok-2", 0)  # free call: no entry, no finding
    _call(t, "capped", 2 * USD, hold=USD)
    open_hold(t, "in-flight", USD)
    open_hold(t, "just-expired", USD, ttl_s=1)
    Hold.objects.filter(request_id="just-expired").update(
        expires_at=timezone.now() - dt.timedelta(seconds=EXPIRY_GRACE_S // 2)
    )
    report = audit(since)
    assert report.drift == []
    assert (report.wallets, report.open_holds) == (1, 2)
    call_command("billing_audit")
    assert "drift=0" in capsys.readouterr().out
    call_command("billing_audit", "--since", since.isoformat())
    assert "drift=0" in capsys.readouterr().out


@both
def test_each_check_finds_its_fault_and_the_command_exits_1(make_tenant, capsys, audit):
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    since = _age()
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
    report = audit(since)
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
    for args in ([], ["--since", since.isoformat()]):
        with pytest.raises(SystemExit) as exit_:
            call_command("billing_audit", *args)
        assert exit_.value.code == 1
        err = capsys.readouterr().err
        assert err.count("DRIFT ") == 6


@both
def test_an_inserted_entry_breaks_the_chain_and_the_sums(make_tenant, audit):
    t = make_tenant(balance_nanos=10 * USD)
    since = _age()
    wallet = Wallet.objects.get(organization=t.org)
    bogus = LedgerEntry.objects.create(
        wallet=wallet,
        kind=EntryKind.CREDIT,
        amount_nanos=5,
        balance_after_nanos=10 * USD,  # should be 10 USD + 5
        idempotency_key="bogus",
    )
    report = audit(since)
    assert _checks(report) == ["balance", "chain"]
    assert f"entry {bogus.pk}: balance_after {10 * USD} != previous {10 * USD} + amount 5" in (
        "\n".join(report.drift)
    )


@both
def test_an_edited_entry_is_found_by_the_chain_alone(make_tenant, audit):
    """The issue's case: a row edited so that the sums still agree but the chain does not.
    Only a superuser can do it (the trigger refuses everyone else): replica mode skips
    triggers for this transaction."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    since = _age()
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
    report = audit(since)
    assert _checks(report) == ["chain", "chain"]  # the edited entry and the one after it
    assert all(f"wallet {middle.wallet_id}" in line for line in report.drift)


@both
def test_late_partial_settlement_is_not_a_finding_but_its_hold_is_checked(make_tenant, audit):
    t = make_tenant(balance_nanos=5 * USD)
    since = timezone.now()
    open_hold(t, "slow", 4 * USD, ttl_s=1)
    holds_expire(now=timezone.now() + dt.timedelta(seconds=5))
    open_hold(t, "other", 4 * USD)
    with transaction.atomic():
        request_log(t, "slow", 3 * USD).save()  # the call cost 3; only 1 was left to collect
        assert hold_settle(request_id="slow", actual_nanos=3 * USD) == USD
    with transaction.atomic():
        request_log(t, "other", 2 * USD).save()
        hold_settle(request_id="other", actual_nanos=2 * USD)
    assert audit(since).drift == []
    # ... but the same shortfall without an expired hold behind it is a finding.
    _call(t, "normal", 500)
    RequestLog.objects.filter(request_id="normal").update(cost_nanos=900)
    assert _checks(audit(since)) == ["log_without_entry"]


@both
def test_queries_do_not_grow_with_the_number_of_rows(make_tenant, audit):
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    since = _age()
    _call(t, "one", 100)
    with CaptureQueriesContext(connection) as few:
        audit(since)
    for n in range(6):
        other = make_tenant(balance_nanos=USD)
        _call(other, f"more-{n}", 100)
        _call(t, f"again-{n}", 100)
    with CaptureQueriesContext(connection) as many:
        report = audit(since)
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
    since = timezone.now()
    _call(t, "pruned", 300)
    RequestLog.objects.filter(request_id="pruned").delete()
    assert _checks(audit_findings()) == ["entry_without_log"]  # within its 10 days
    assert _checks(audit_findings(since=since)) == ["entry_without_log"]
    later = timezone.now() + dt.timedelta(days=12)
    monkeypatch.setattr("billing.audit.timezone.now", lambda: later)
    assert audit_findings().findings == []  # past them: deleted by design
    _call(t, "lost", 300)  # written "now", 12 days before the audit's clock: within 400 days
    t.org.request_log_retention_days = None
    t.org.save(update_fields=["request_log_retention_days"])
    RequestLog.objects.filter(request_id="lost").delete()
    assert _checks(audit_findings()) == ["entry_without_log", "entry_without_log"]


@both
def test_wallet_and_counter_faults_are_found_by_both(make_tenant, audit):
    """The state checks read the books' present state whole, in a window too."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    since = _age()
    open_hold(t, "in-flight", USD)
    Wallet.objects.filter(organization=t.org).update(
        balance_nanos=F("balance_nanos") + 7, held_nanos=F("held_nanos") + 1
    )
    ProjectSpend.objects.filter(project=t.project).update(held_nanos=F("held_nanos") + 3)
    report = audit(since)
    assert _checks(report) == ["balance", "held", "newest_entry", "spend"]
    assert "(drift 7)" in "\n".join(report.drift)
    ProjectSpend.objects.filter(project=t.project).delete()  # open holds, no counter
    assert "held, no spend row" in "\n".join(audit(since).drift)


@both
def test_a_settlement_waiting_in_a_journal_is_found_by_both(make_tenant, settings, tmp_path, audit):
    settings.INFRAI_JOURNAL_DIR = tmp_path
    _history(make_tenant(balance_nanos=10 * USD))
    since = _age()
    journal.directory().mkdir(parents=True)
    orphan = journal.JournalFile.lock(journal.directory() / "gone.jsonl", create=True)
    assert orphan is not None
    orphan.append(journal.Intent(row={"request_id": "req_waiting"}, held=True, cost=700).line())
    assert _checks(audit(since)) == ["journal"]


@both
def test_an_old_hold_that_expired_while_its_process_lived_is_found_by_both(make_tenant, audit):
    """A hold opened long before the window, expired in it: its expiry's ledger entry brings it
    into the window."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    open_hold(t, "alive", 5_000)
    since = _age()  # opened 3 hours ago: past its expiry
    assert holds_expire() == 1
    process_seen()  # ... while its process lived on
    assert _checks(audit(since)) == ["expired_alive"]


@both
def test_a_late_settlement_of_an_old_call_is_in_the_window(make_tenant, audit):
    """Calls that arrived long before the window and were settled in it (a journal replay):
    their rows sit in old partitions, their holds below the window's, their entries in it —
    the window reads all three through the entries."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    for rid in ("slow", "slower", "slowest"):
        open_hold(t, rid, USD)
    since = _age()
    for rid, cost in (("slow", 500), ("slower", 400), ("slowest", 300)):
        with transaction.atomic():
            row = request_log(t, rid, cost)
            row.created_at = timezone.now() - OLD  # its arrival: the row's partition key
            row.save()
            hold_settle(request_id=rid, actual_nanos=cost)
    assert audit(since).drift == []  # rows found in their partitions: no entry_without_log
    RequestLog.objects.filter(request_id="slow").update(cost_nanos=600)
    Hold.objects.filter(request_id="slower").update(captured_nanos=450)
    RequestLog.objects.filter(request_id="slowest").update(cost_nanos=-1)
    report = audit(since)
    assert _checks(report) == ["capture", "log_without_entry", "negative_cost"]
    lines = "\n".join(report.drift)
    assert "request slow: cost 600 != usage entry 500" in lines
    assert "hold slower: captured 450 != usage entry 400" in lines


def test_a_fault_written_before_the_window_is_found_by_the_full_audit_alone(make_tenant):
    """The window is what was written since the previous audit began: a fault older than that
    was in an earlier window. Here it is backdated past the window as only a superuser could
    (an entry edited under replica mode, which skips the ledger's trigger) or as no writer
    does (a row written long after its call with no usage entry): the daily full audit finds
    it; the routine one cannot, by design (``billing/audit.py``'s docstring)."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    _call(t, "a", USD)
    _call(t, "b", USD)
    request_log(t, "free-ride", 700).save()
    with connection.cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute(
            "UPDATE billing_ledgerentry SET balance_after_nanos = balance_after_nanos + 7"
            " WHERE request_id = 'a'"
        )
        cur.execute("SET LOCAL session_replication_role = DEFAULT")
    since = _age()
    _call(t, "new", 100)  # the window's own traffic, clean
    window = audit_findings(since=since)
    assert window.drift == [] and window.entries == 1
    assert _checks(audit_findings()) == ["chain", "chain", "log_without_entry"]


def test_the_window_starts_its_margins_before_since(make_tenant):
    """Entries from :data:`billing.audit.WINDOW_SLACK` before ``since``, holds and request-log
    rows from :func:`billing.audit.window_margin` before it (written late, keyed early)."""
    t = make_tenant(balance_nanos=10 * USD)
    _history(t)
    _age(window_margin() - dt.timedelta(minutes=1))  # within the rows' margin, past the slack
    window = audit_findings(since=timezone.now())
    assert window.window is not None and window.window.entry_id > 0
    assert window.window.hold_id == 0  # every hold is in it
    RequestLog.objects.filter(request_id="old-1").update(cost_nanos=1)
    assert _checks(audit_findings(since=timezone.now())) == ["log_without_entry"]


def test_the_routine_task_audits_since_the_last_audit_and_keeps_history_findings(
    make_tenant, caplog
):
    """``billing.audit``: the whole books while no audit is on record, then the window since
    the last one began. A finding of history stays in the metric after it left the window,
    until a full audit no longer finds it; a finding of state goes when the state is fixed."""
    t = make_tenant(balance_nanos=USD)
    request_log(t, "free-ride", 700).save()
    assert tasks.audit() == 1
    first = cache.get(tasks.AUDIT_RESULT_KEY)
    assert first["since"] is None and first["checks"] == {"log_without_entry": 1}
    _age()  # the free ride is now older than any window
    open_hold(t, "stuck", 1_000)
    Hold.objects.filter(request_id="stuck").update(
        expires_at=timezone.now() - dt.timedelta(seconds=EXPIRY_GRACE_S + 60)
    )
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="billing.tasks"):
        assert tasks.audit() == 1  # the window: the stuck hold alone
    assert [r.getMessage()[:26] for r in caplog.records] == ["billing audit: stuck_hold:"]
    second = cache.get(tasks.AUDIT_RESULT_KEY)
    assert second["since"] == first["started"] < second["started"]
    assert second["checks"] == {"log_without_entry": 1, "stuck_hold": 1}
    assert holds_expire() == 1  # the sweeper runs again
    assert tasks.audit() == 0
    assert cache.get(tasks.AUDIT_RESULT_KEY)["checks"] == {"log_without_entry": 1}
    assert tasks.audit_full() == 1
    RequestLog.objects.filter(request_id="free-ride").delete()
    assert tasks.audit() == 0
    assert cache.get(tasks.AUDIT_RESULT_KEY)["checks"] == {"log_without_entry": 1}
    assert tasks.audit_full() == 0
    assert cache.get(tasks.AUDIT_RESULT_KEY)["checks"] == {}
    assert tasks.BEAT_SCHEDULE["billing.audit_full"]["task"] == "billing.audit_full"
