"""Celery tasks of the request path and their beat schedule."""

from __future__ import annotations

import asyncio
import datetime as dt

from celery import shared_task
from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from accounts.models import Organization
from billing.models import Hold, HoldStatus, Process
from inference import partitions, request_ids, rollups
from inference.models import RequestLog, RequestStatus, ResponseStatus, StoredResponse

# A hold whose process was seen alive after it expired may still be settled from that
# process's journal; its call is logged ``abandoned`` only once this long has passed.
JOURNAL_GRACE = dt.timedelta(minutes=10)


def log_abandoned_calls(*, since: dt.timedelta = dt.timedelta(days=2)) -> int:
    """Write a request-log row for every call whose hold expired with no row.

    Such a call's process stopped (SIGKILL, a crash) before it could settle: its hold expired,
    charged to its last checkpoint. The row (status ``abandoned``, HTTP 0, the checkpoint's
    cost, ``process_died``) makes the call visible to the customer. A hold whose process lived
    on after the expiry (its settlement could not reach the database and may still be in its
    journal) gets its row only after :data:`JOURNAL_GRACE`, coded ``settlement_lost``; the audit
    reports such holds (``expired_alive``). A late settlement replaces the row. Returns how many
    rows were written.
    """
    now = timezone.now()
    alive_after = Process.objects.filter(
        token=OuterRef("process"), seen_at__gt=OuterRef("closed_at")
    )
    orphans = (
        Hold.objects.filter(status=HoldStatus.EXPIRED, closed_at__gte=now - since)
        .annotate(alive=Exists(alive_after))
        .filter(~Exists(RequestLog.objects.filter(request_id=OuterRef("request_id"))))
        .exclude(alive=True, closed_at__gt=now - JOURNAL_GRACE)
        .select_related("wallet")
    )
    rows = [
        RequestLog(
            request_id=hold.request_id,
            organization_id=hold.wallet.organization_id,
            project_id=hold.project_id,
            api_key_id=hold.api_key_id,
            # The call's own time (its id carries it), as its late settlement would write.
            created_at=request_ids.created_at(hold.request_id) or hold.created_at,
            endpoint="unknown",
            status=RequestStatus.ABANDONED,
            http_status=0,
            error_code="settlement_lost" if hold.alive else "process_died",
            cost_nanos=hold.captured_nanos or 0,
        )
        for hold in orphans
    ]
    RequestLog.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


@shared_task(name="inference.log_abandoned_calls", ignore_result=True)
def log_abandoned_calls_task() -> int:
    """:func:`log_abandoned_calls` (beat, every minute after the hold sweeper)."""
    return log_abandoned_calls()


@shared_task(name="inference.replay_journals", ignore_result=True)
def replay_journals_task() -> int:
    """Make the settlements left in the journals of this host's stopped processes
    (:mod:`billing.journal`); returns how many are still waiting (beat, every minute)."""
    from inference.settlement import replay_journal
    from infra import adb

    async def run() -> int:
        try:
            return await replay_journal(orphans=True)
        finally:
            await adb.close()

    return asyncio.run(run())


def expire_stored_responses() -> tuple[int, int]:
    """Delete stored responses older than their organization's retention
    (``Organization.response_retention_days``, else ``INFRAI_RESPONSES_RETENTION_DAYS``), and mark
    ``failed`` the background responses still ``queued``/``in_progress`` long after any
    generation could have ended (``INFRAI_MAX_STREAM_S`` plus the hold TTL: their process
    died; the hold sweeper settled their hold). Returns (deleted, failed)."""
    now = timezone.now()
    default = int(settings.INFRAI_RESPONSES_RETENTION_DAYS)
    own = dict(
        Organization.objects.filter(response_retention_days__isnull=False).values_list(
            "pk", "response_retention_days"
        )
    )
    deleted, _ = (
        StoredResponse.objects.exclude(organization_id__in=own)
        .filter(created_at__lt=now - dt.timedelta(days=default))
        .delete()
    )
    for organization_id, days in own.items():
        gone, _ = StoredResponse.objects.filter(
            organization_id=organization_id, created_at__lt=now - dt.timedelta(days=days or 0)
        ).delete()
        deleted += gone
    stale = now - dt.timedelta(
        seconds=float(settings.INFRAI_MAX_STREAM_S) + float(settings.INFRAI_HOLD_TTL_S)
    )
    failed = 0
    running = (ResponseStatus.QUEUED, ResponseStatus.IN_PROGRESS)
    for row in StoredResponse.objects.filter(status__in=running, created_at__lt=stale):
        error = {"code": "process_died", "message": "The process generating it stopped."}
        row.body = {**row.body, "status": ResponseStatus.FAILED.value, "error": error}
        row.status = ResponseStatus.FAILED
        row.save(update_fields=["status", "body"])
        failed += 1
    return deleted, failed


@shared_task(name="inference.expire_stored_responses", ignore_result=True)
def expire_stored_responses_task() -> tuple[int, int]:
    """:func:`expire_stored_responses` (beat, hourly)."""
    return expire_stored_responses()


@shared_task(name="inference.maintain_request_log", ignore_result=True)
def maintain_request_log_task() -> dict[str, object]:
    """:func:`inference.partitions.maintain`: partitions ahead, expired ones dropped, rows and
    prompts past retention deleted in bounded batches (beat, hourly)."""
    done = partitions.maintain()
    return {
        "created": done.created,
        "dropped": done.dropped,
        "deleted_rows": done.deleted_rows,
        "cleared_prompts": done.cleared_prompts,
    }


@shared_task(name="inference.drain_usage", ignore_result=True)
def drain_usage_task() -> int:
    """:func:`inference.rollups.drain`: the usage queue into the daily rollups (beat, every
    ``INFRAI_USAGE_DRAIN_S`` seconds)."""
    return rollups.drain()


BEAT_SCHEDULE = {
    "inference.drain_usage": {
        "task": "inference.drain_usage",
        "schedule": float(settings.INFRAI_USAGE_DRAIN_S),
        # A drain that waited this long behind other tasks is the next one's work.
        "options": {"expires": float(settings.INFRAI_USAGE_DRAIN_S)},
    },
    "inference.maintain_request_log": {
        "task": "inference.maintain_request_log",
        "schedule": 3600.0,
    },
    "inference.expire_stored_responses": {
        "task": "inference.expire_stored_responses",
        "schedule": 3600.0,
    },
    "inference.log_abandoned_calls": {
        "task": "inference.log_abandoned_calls",
        "schedule": 60.0,
    },
    "inference.replay_journals": {"task": "inference.replay_journals", "schedule": 60.0},
}
