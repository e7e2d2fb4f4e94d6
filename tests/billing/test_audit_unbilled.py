"""The audit finds every call that may have been served unbilled (issue 27): a hold that expired
while its process lived on, a settlement still waiting in a journal — and the metric and the
command say so."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import journal
from billing.audit import audit_findings
from billing.models import Hold, HoldStatus, Process
from billing.services import holds_expire, process_seen, process_token
from billing.tasks import audit
from config import scrape
from inference import tasks as inference_tasks
from inference.models import RequestLog, RequestStatus
from tests.billing.conftest import Tenant, open_hold


def _open_expired_hold(tenant: Tenant, request_id: str) -> Hold:
    open_hold(tenant, request_id, 5_000, ttl_s=1)
    hold = Hold.objects.get(request_id=request_id)
    Hold.objects.filter(pk=hold.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=5))
    assert holds_expire() == 1
    hold.refresh_from_db()
    return hold


@pytest.mark.django_db
def test_a_hold_expired_while_its_process_lived_on_is_a_finding(make_tenant):
    hold = _open_expired_hold(make_tenant(balance_nanos=1_000_000), "req_alive")
    assert hold.process == process_token()
    assert audit_findings().findings == []  # not seen since: it may have died

    process_seen()  # ...but it was alive after its hold expired
    report = audit_findings()
    assert [f.check for f in report.findings] == ["expired_alive"]
    assert "req_alive" in report.findings[0].detail

    # Its call is not logged as a dead process's: not while its journal may still settle it,
    # and then as a lost settlement.
    assert inference_tasks.log_abandoned_calls() == 0
    Hold.objects.filter(pk=hold.pk).update(closed_at=timezone.now() - dt.timedelta(minutes=11))
    Process.objects.filter(token=hold.process).update(seen_at=timezone.now())
    assert inference_tasks.log_abandoned_calls() == 1
    row = RequestLog.objects.get(request_id="req_alive")
    assert (row.status, row.error_code) == (RequestStatus.ABANDONED, "settlement_lost")

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("billing_audit", stdout=out, stderr=err)
    assert exit_.value.code == 1
    assert "expired_alive" in err.getvalue()


@pytest.mark.django_db
def test_a_dead_process_expired_hold_is_no_finding(make_tenant):
    tenant = make_tenant(balance_nanos=1_000_000)
    process_seen()  # alive, then gone before its hold expired
    Process.objects.update(seen_at=timezone.now() - dt.timedelta(minutes=1))
    hold = _open_expired_hold(tenant, "req_dead")
    assert hold.status == HoldStatus.EXPIRED
    assert audit_findings().findings == []
    assert inference_tasks.log_abandoned_calls() == 1
    assert RequestLog.objects.get(request_id="req_dead").error_code == "process_died"


@pytest.mark.django_db
def test_a_settlement_waiting_in_a_journal_is_a_finding_and_the_metric_counts_it(
    tmp_path, settings
):
    settings.INFRAI_JOURNAL_DIR = tmp_path
    folder = journal.directory()
    folder.mkdir(parents=True)
    orphan = journal.JournalFile.lock(folder / "gone.jsonl", create=True)
    assert orphan is not None
    intent = journal.Intent(row={"request_id": "req_waiting"}, held=True, cost=700)
    orphan.append(intent.line())
    report = audit_findings()
    assert [f.check for f in report.findings] == ["journal"]
    assert "gone.jsonl" in report.findings[0].detail

    assert audit() == 1  # the beat task
    text = "\n".join(
        line for line in scrape.exposition().decode().splitlines() if "billing_audit" in line
    )
    assert 'infrai_billing_audit_findings{check="journal"} 1.0' in text
    assert 'infrai_billing_audit_findings{check="balance"} 0.0' in text

    orphan.append(b'{"done": "req_waiting"}')
    assert journal.pending_everywhere() == {}
    assert audit_findings().findings == []
