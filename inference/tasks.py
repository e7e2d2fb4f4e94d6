"""Celery tasks of the request path and their beat schedule."""

from __future__ import annotations

import datetime as dt

from celery import shared_task
from django.db.models import Exists, OuterRef
from django.utils import timezone

from billing.models import EntryKind, LedgerEntry
from inference.models import RequestLog, RequestStatus


def log_abandoned_calls(*, since: dt.timedelta = dt.timedelta(days=2)) -> int:
    """Write a request-log row for every call whose hold the sweeper released with no row.

    Such a call's process died (SIGKILL, a crash) before it could settle: its hold expired
    free and the ``hold_expired`` ledger entry names the request. The row (status
    ``abandoned``, HTTP 0) makes the call visible to the customer. Returns how many rows.
    """
    orphans = (
        LedgerEntry.objects.filter(
            kind=EntryKind.HOLD_EXPIRED, created_at__gte=timezone.now() - since
        )
        .exclude(request_id="")
        .filter(~Exists(RequestLog.objects.filter(request_id=OuterRef("request_id"))))
        .select_related("wallet")
    )
    rows = [
        RequestLog(
            request_id=entry.request_id,
            organization_id=entry.wallet.organization_id,
            project_id=entry.project_id,
            api_key_id=entry.api_key_id,
            created_at=entry.created_at,
            endpoint="unknown",
            status=RequestStatus.ABANDONED,
            http_status=0,
            error_code="process_died",
        )
        for entry in orphans
    ]
    RequestLog.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


@shared_task(name="inference.log_abandoned_calls", ignore_result=True)
def log_abandoned_calls_task() -> int:
    """:func:`log_abandoned_calls` (beat, every minute after the hold sweeper)."""
    return log_abandoned_calls()


BEAT_SCHEDULE = {
    "inference.log_abandoned_calls": {
        "task": "inference.log_abandoned_calls",
        "schedule": 60.0,
    },
}
