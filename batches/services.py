"""Writes of the Batch API: a batch and its lines stored at submission, a worker's claim and
lease, each line's outcome, cancellation, and the end of a batch — its output and error files
written and what is left of its reservation released.

Money: the batch's hold (request id = the batch's id) is opened by the submission
(:mod:`batches.submission`) before anything is stored; each line carves its own part out of
it and is settled by the call path (:mod:`batches.runner`); :func:`batch_finalize` settles
the batch's hold at 0, which releases exactly what no line used — once, whatever ends the
batch (the last line, a cancel, the completion window's end).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from batches.models import FINAL, RUNNABLE, Batch, BatchLine, BatchStatus, LineStatus
from billing.services import HoldNotFound, hold_settle
from config.errors import ApiError, InvalidRequest
from inference import request_ids
from money.pricing import Usage
from vectors import files

log = logging.getLogger(__name__)

RUN_TASK = "batches.run"
#: How long a worker's claim on a batch lasts without a renewal (renewed after every line).
LEASE = dt.timedelta(minutes=15)
#: The batch's hold outlives its completion window by this much (the sweeper ends the batch).
HOLD_GRACE = dt.timedelta(hours=1)
WINDOW = dt.timedelta(hours=24)

_NOT_RUN = {
    LineStatus.CANCELLED: (
        "batch_cancelled",
        "This request was not executed: the batch was cancelled.",
    ),
    LineStatus.EXPIRED: (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
}


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class NewLine:
    """A validated line of an input file: its number (1-based), ``custom_id``, body and the
    nano-USD its worst case reserves."""

    number: int
    custom_id: str
    body: dict[str, Any]
    reserved_nanos: int


def batch_create(
    *,
    public_id: str,
    organization_id: int,
    project_id: int,
    api_key_id: int,
    endpoint: str,
    input_file_id: str,
    metadata: dict[str, str] | None,
    lines: list[NewLine],
) -> Batch:
    """Store a batch whose hold (request id ``public_id``) is open, with its lines, in one
    transaction; its worker is queued once it commits (:func:`batch_enqueue`)."""
    now = timezone.now()
    with transaction.atomic():
        batch = Batch.objects.create(
            public_id=public_id,
            organization_id=organization_id,
            project_id=project_id,
            api_key_id=api_key_id,
            endpoint=endpoint,
            input_file_id=input_file_id,
            metadata=metadata,
            reserved_nanos=sum(line.reserved_nanos for line in lines),
            total=len(lines),
            created_at=now,
            expires_at=now + WINDOW,
        )
        BatchLine.objects.bulk_create(
            (
                BatchLine(
                    batch=batch,
                    number=line.number,
                    custom_id=line.custom_id,
                    body=line.body,
                    reserved_nanos=line.reserved_nanos,
                )
                for line in lines
            ),
            batch_size=1000,
        )
        transaction.on_commit(lambda: batch_enqueue(public_id))
    return batch


def batch_enqueue(public_id: str) -> None:
    """Queue the batch's worker (:data:`RUN_TASK`). Not with eager Celery (tests, a shell):
    that would run the whole batch inside the request that submitted it — there the batch
    waits for :func:`batches.tasks.batch_sweep` or a direct :func:`batches.runner.run`."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return
    current_app.tasks[RUN_TASK].delay(public_id)


def release_reservation(*, public_id: str) -> None:
    """Settle the batch's hold at 0: what its lines did not carve out goes back to the wallet
    (no ledger entry; exactly once — a second call changes nothing)."""
    try:
        hold_settle(request_id=public_id, actual_nanos=0, description=f"batch {public_id}")
    except HoldNotFound:
        log.warning("batch %s has no hold to release", public_id)


# --- the worker -------------------------------------------------------------------------------


def batch_claim(*, public_id: str) -> Batch | None:
    """Claim the batch for this worker until now + :data:`LEASE` (``in_progress`` from here);
    ``None`` when it is final, or another worker's lease is current."""
    now = timezone.now()
    claimed = Batch.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now),
        public_id=public_id,
    ).exclude(status__in=FINAL)
    if not claimed.update(lease_until=now + LEASE):
        return None
    Batch.objects.filter(public_id=public_id, status=BatchStatus.VALIDATING).update(
        status=BatchStatus.IN_PROGRESS, in_progress_at=now
    )
    batch = Batch.objects.get(public_id=public_id)
    # Lines a previous worker started and never recorded: it stopped mid-call.
    for line in BatchLine.objects.filter(batch=batch, status=LineStatus.PENDING).exclude(
        request_id=""
    ):
        _lost_line(line)
    return batch


def lease_release(*, batch_id: int) -> None:
    Batch.objects.filter(pk=batch_id).update(lease_until=None)


def line_next(*, batch_id: int) -> BatchLine | None:
    """The next line to run, with its ids assigned — saved before it runs, so a line whose
    worker died after it started is never run twice (:func:`batch_claim` sends it to the error
    file) — or ``None`` when the batch should stop: no line left to start, cancelling, or past
    its window. Safe to call concurrently (each line is handed out once)."""
    batch = Batch.objects.get(pk=batch_id)
    if batch.status not in RUNNABLE or batch.expires_at <= timezone.now():
        return None
    with transaction.atomic():
        line = (
            BatchLine.objects.select_for_update(skip_locked=True)
            .filter(batch_id=batch_id, status=LineStatus.PENDING, request_id="")
            .order_by("number")
            .first()
        )
        if line is None:
            return None
        line.public_id = "batch_req_" + secrets.token_hex(12)
        line.request_id = request_ids.new()  # carries its time: the log's partition key
        line.save(update_fields=["public_id", "request_id"])
    Batch.objects.filter(pk=batch_id).update(lease_until=timezone.now() + LEASE)
    return line


def _lost_line(line: BatchLine) -> None:
    """A line whose worker stopped while it ran: it is not run again (it may have been served
    and charged — its request-log row and ledger entry under ``request_id`` say); it goes to
    the error file."""
    error = {
        "code": "batch_worker_lost",
        "message": "The worker running this request stopped before recording its answer; "
        f"see request {line.request_id} in the request log.",
    }
    line_record(
        line_id=line.pk,
        status=LineStatus.FAILED,
        http_status=None,
        body=None,
        error=error,
        cost_nanos=0,
    )


def line_record(
    *,
    line_id: int,
    status: LineStatus,
    http_status: int | None,
    body: dict[str, Any] | None,
    error: dict[str, Any] | None,
    cost_nanos: int,
    usage: Usage | None = None,
) -> None:
    """What became of a line (its call is settled already), and the batch's counts and
    usage."""
    with transaction.atomic():
        line = BatchLine.objects.select_for_update().get(pk=line_id)
        if line.status != LineStatus.PENDING:
            return
        line.status, line.http_status = status, http_status
        line.response_body, line.error, line.cost_nanos = body, error, cost_nanos
        line.save(update_fields=["status", "http_status", "response_body", "error", "cost_nanos"])
        counted = "completed" if status is LineStatus.COMPLETED else "failed"
        used = usage or Usage()
        Batch.objects.filter(pk=line.batch_id).update(
            **{counted: F(counted) + 1},
            spent_nanos=F("spent_nanos") + cost_nanos,
            input_tokens=F("input_tokens") + used.input_tokens,
            cached_input_tokens=F("cached_input_tokens") + used.cached_input_tokens,
            output_tokens=F("output_tokens") + used.output_tokens,
            reasoning_tokens=F("reasoning_tokens") + used.reasoning_tokens,
        )


# --- cancel and the end -----------------------------------------------------------------------


def batch_cancel(*, batch: Batch) -> Batch:
    """``cancelling`` a batch that may still run lines; a batch no worker runs now is ended at
    once (:func:`batch_finalize`), else its worker ends it before its next line. A final batch
    is a 409-like 400 (OpenAI's ``batch_not_cancellable``)."""
    now = timezone.now()
    if batch.status in FINAL or batch.status == BatchStatus.FINALIZING:
        raise InvalidRequest(
            f"Batch {batch.public_id} cannot be cancelled: it is {batch.status}.",
            code="batch_not_cancellable",
            param="batch_id",
        )
    Batch.objects.filter(pk=batch.pk, status__in=RUNNABLE).update(
        status=BatchStatus.CANCELLING, cancelling_at=now
    )
    unleased = Batch.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now), pk=batch.pk
    ).update(lease_until=now + LEASE)
    if unleased:
        try:
            batch_finalize(batch_id=batch.pk)
        finally:
            lease_release(batch_id=batch.pk)
    return Batch.objects.get(pk=batch.pk)


def batch_finalize(*, batch_id: int) -> Batch:
    """End a batch whose lines stop here (called by its lease holder): lines not run are
    ``cancelled`` (a cancelling batch) or ``expired`` (past its window); a batch with lines
    still to run and neither is left as it is. Then, in this order: the reservation's rest is
    released (:func:`release_reservation`), the output and error files are written, and the
    batch is ``completed`` / ``cancelled`` / ``expired``."""
    batch = Batch.objects.get(pk=batch_id)
    if batch.status in FINAL:
        return batch
    now = timezone.now()
    pending = BatchLine.objects.filter(batch_id=batch_id, status=LineStatus.PENDING)
    if batch.status == BatchStatus.CANCELLING:
        final, not_run = BatchStatus.CANCELLED, LineStatus.CANCELLED
    elif batch.expires_at <= now:
        final, not_run = BatchStatus.EXPIRED, LineStatus.EXPIRED
    elif pending.exists():
        return batch
    else:
        final, not_run = BatchStatus.COMPLETED, LineStatus.EXPIRED
    code, message = _NOT_RUN[not_run]
    pending.update(status=not_run, error={"code": code, "message": message})
    if final == BatchStatus.COMPLETED:
        Batch.objects.filter(pk=batch_id).update(status=BatchStatus.FINALIZING, finalizing_at=now)
    release_reservation(public_id=batch.public_id)
    output, errors = _output_files(batch)
    stamp = {
        BatchStatus.COMPLETED: "completed_at",
        BatchStatus.CANCELLED: "cancelled_at",
        BatchStatus.EXPIRED: "expired_at",
    }[final]
    Batch.objects.filter(pk=batch_id).update(
        status=final,
        output_file_id=output,
        error_file_id=errors,
        lease_until=None,
        **{stamp: timezone.now()},
    )
    return Batch.objects.get(pk=batch_id)


def output_line(line: BatchLine) -> dict[str, Any]:
    """OpenAI's line of a batch's output or error file."""
    response = None
    if line.http_status is not None:
        response = {
            "status_code": line.http_status,
            "request_id": line.request_id,
            "body": line.response_body,
        }
    return {
        "id": line.public_id or f"batch_req_{line.batch_id}_{line.number}",
        "custom_id": line.custom_id,
        "response": response,
        "error": line.error if response is None else None,
    }


def _output_files(batch: Batch) -> tuple[str, str]:
    """Write the batch's output file (lines answered 200) and error file (every other line),
    each only when it has a line; their ids (``""`` for none). A file the organization's
    storage quota refuses is noted in the batch's ``errors``."""
    out: list[bytes] = []
    err: list[bytes] = []
    for line in BatchLine.objects.filter(batch_id=batch.pk).order_by("number").iterator():
        text = json.dumps(output_line(line), ensure_ascii=False).encode() + b"\n"
        (out if line.status == LineStatus.COMPLETED else err).append(text)
    ids = []
    for kind, content in (("output", out), ("error", err)):
        if not content:
            ids.append("")
            continue
        try:
            stored = files.file_create(
                organization_id=batch.organization_id,
                project_id=batch.project_id,
                filename=f"{batch.public_id}_{kind}.jsonl",
                purpose="batch_output",
                content=b"".join(content),
            )
        except ApiError as exc:
            _note_error(batch, code=exc.code or "output_file_failed", message=exc.message)
            ids.append("")
            continue
        ids.append(stored.public_id)
    return ids[0], ids[1]


def _note_error(batch: Batch, *, code: str, message: str) -> None:
    current = Batch.objects.get(pk=batch.pk).errors or {"object": "list", "data": []}
    current["data"].append({"code": code, "message": message, "param": None, "line": None})
    Batch.objects.filter(pk=batch.pk).update(errors=current)


def batches_due() -> list[str]:
    """Batches a worker should look at (:func:`batches.tasks.batch_sweep`): not final, no
    current lease — never claimed (eager Celery), their worker gone, cancelling, or past
    their window."""
    now = timezone.now()
    return list(
        Batch.objects.exclude(status__in=FINAL)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .order_by("pk")
        .values_list("public_id", flat=True)[:100]
    )
