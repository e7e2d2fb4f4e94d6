"""The request log: one row per ``/v1`` call.

A call that held money has its row written with its settlement, in one transaction, before
the response ends (:func:`inference.settlement.finish`): a client that has read its answer
can see both. It is on the request path, not deferred.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import Q
from django.utils import timezone

from config.errors import ApiError
from inference import request_ids
from infra.outages import OUTAGE_CODE


class RequestStatus(models.TextChoices):
    OK = "ok", "OK"
    CLIENT_ERROR = "client_error", "Client error"
    VENDOR_ERROR = "vendor_error", "Vendor error"
    CANCELLED = "cancelled", "Client disconnected"
    ABANDONED = "abandoned", "Abandoned (the serving process died)"
    UNAVAILABLE = "unavailable", "Infrastructure unavailable"

    @classmethod
    def of_error(cls, exc: ApiError) -> RequestStatus:
        """The status a call that ended in ``exc`` is logged with."""
        if exc.code == OUTAGE_CODE:
            return cls.UNAVAILABLE
        return cls.VENDOR_ERROR if exc.status >= 500 else cls.CLIENT_ERROR


class UsageSource(models.TextChoices):
    """Where a call's billed token counts came from (``docs/billing.md``, "Vendor usage against
    the relay")."""

    VENDOR = "vendor", "Vendor's usage"
    COUNTED = "counted", "Our count of what was relayed"
    CAPPED = "capped", "Capped at the output cap"


class RequestLog(models.Model):
    """One call. Tenant references are plain ids (no FK) so the writer never waits on locks
    and rows survive key deletion; the dashboard filters by ``organization_id`` first.

    **Partitioned by month of ``created_at``** (``docs/deploy.md``, "The request log at
    scale"): migration 0010 made the table a ``PARTITION BY RANGE (created_at)`` parent with
    monthly partitions ``inference_requestlog_pYYYYMM`` and a ``…_default`` partition that
    catches rows outside them; :func:`inference.partitions.maintain` (beat) creates partitions
    ahead and drops those past every organization's retention. PostgreSQL requires the
    partition key in every unique constraint, so the primary key is ``(id, created_at)`` in
    the database (Django keeps ``id`` as its pk: ids come from one sequence and stay unique,
    and the admin and ``update_or_create`` work unchanged) and the exactly-once key of the
    settlement's ``INSERT … ON CONFLICT`` is ``(request_id, created_at)``.

    That key is exact only if every write of a call's row carries the same ``created_at``;
    the request id carries it (:mod:`inference.request_ids`: ``req_`` + creation time +
    randomness), so the settlement, the sweeper's ``abandoned`` row and a journal replay all
    derive it from the id (:func:`created_at_of`). Chosen over a separate unpartitioned table
    of request ids (one more index entry and heap row on every call, and a table that grows
    without a partition to drop) and over partitioning by a computed column (the same fact
    stored twice). ``created_at`` is thus when the call arrived (before: when its row was
    built, at the end of the call).

    Every insert and every update of a usage column is queued for the daily rollups
    (:class:`UsagePending`, :mod:`inference.rollups`) by a trigger in the same statement
    (migrations 0010 and 0012), whoever writes the row.
    """

    request_id = models.CharField(max_length=40)  # unique: Meta.constraints
    organization_id = models.BigIntegerField()
    project_id = models.BigIntegerField(null=True)
    api_key_id = models.BigIntegerField(null=True)
    created_at = models.DateTimeField(default=timezone.now)
    endpoint = models.CharField(max_length=40)
    requested_model = models.CharField(max_length=120, blank=True)
    model = models.CharField(max_length=120, blank=True)
    vendor = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=32, blank=True)
    status = models.CharField(max_length=16, choices=RequestStatus.choices)
    http_status = models.PositiveSmallIntegerField()
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    input_tokens = models.IntegerField(default=0)  # every prompt token, cache reads/writes too
    cached_input_tokens = models.IntegerField(default=0)
    # Prompt tokens written to the vendor's prompt cache (5-minute and 1-hour writes), and
    # the part of output_tokens that was hidden reasoning; the database default as for
    # usage_source (a process of the previous release names no such column).
    cache_write_tokens = models.IntegerField(default=0, db_default=0)
    output_tokens = models.IntegerField(default=0)
    reasoning_tokens = models.IntegerField(default=0, db_default=0)
    usage_estimated = models.BooleanField(default=False)
    # The database default keeps a process of the previous release, which names no such
    # column in its INSERT, writing rows while the new one rolls out.
    usage_source = models.CharField(
        max_length=8,
        choices=UsageSource.choices,
        default=UsageSource.VENDOR,
        db_default=UsageSource.VENDOR,
    )
    cost_nanos = models.BigIntegerField(default=0)
    latency_ms = models.IntegerField(default=0)
    ttft_ms = models.IntegerField(null=True)
    stream = models.BooleanField(default=False)
    cache_hit = models.BooleanField(default=False)
    failovers = models.SmallIntegerField(default=0)
    routing = models.JSONField(default=dict, blank=True)
    ignored_params = models.JSONField(default=list, blank=True)
    prompt = models.TextField(blank=True, help_text="Only when the organization opted in.")

    class Meta:
        indexes = [
            models.Index(fields=["organization_id", "-created_at"]),
            models.Index(fields=["organization_id", "model", "-created_at"]),
            models.Index(fields=["organization_id", "project_id", "-created_at"]),
            # Platform-wide time ranges (the model status page): a BRIN index is a few pages
            # for a year of rows and costs an insert almost nothing (rows arrive in time order).
            BrinIndex(fields=["created_at"], name="requestlog_created_brin"),
            # Rows still holding a prompt, for the retention task that clears prompts early.
            models.Index(
                fields=["created_at"], name="requestlog_prompt_kept", condition=~Q(prompt="")
            ),
        ]
        # Not unique=True on the field: PostgreSQL would add a LIKE-only index beside the
        # unique one, written on every call for queries nobody makes. The partition key must
        # be part of it (see the class's docstring).
        constraints = [
            models.UniqueConstraint(
                fields=["request_id", "created_at"], name="uniq_requestlog_request_created"
            ),
        ]

    def __str__(self) -> str:
        return self.request_id


def created_at_of(request_id: str) -> datetime:
    """The ``created_at`` every writer of ``request_id``'s log row uses: the time the id
    carries, else (an id of another format) now."""
    return request_ids.created_at(request_id) or timezone.now()


class UsageFigures(models.Model):
    """The figures of one usage group: a UTC day, organization, project, key, model, vendor and
    endpoint, with what its calls added up to."""

    day = models.DateField()
    organization_id = models.BigIntegerField()
    project_id = models.BigIntegerField(null=True)
    api_key_id = models.BigIntegerField(null=True)
    model = models.CharField(max_length=120)
    vendor = models.CharField(max_length=64)
    endpoint = models.CharField(max_length=40)
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)  # calls whose status is not ok
    cache_hits = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.organization_id} {self.day} {self.model}"


class UsagePending(UsageFigures):
    """What log rows added to their groups that the drain has not yet moved into
    :class:`UsageDaily`: one row per inserted log row (an update of a usage column appends the
    old figures negated and the new ones).

    Written only by the trigger ``inference_usage_daily_apply`` on :class:`RequestLog`
    (migrations 0010 and 0012), in the statement that writes the log row, so nothing another
    call writes is touched and no settlement waits on another; emptied by
    :func:`inference.rollups.drain` (beat, every ``INFRAI_USAGE_DRAIN_S``).
    """

    class Meta:
        db_table = "inference_usage_pending"


class UsageDaily(UsageFigures):
    """The request log summed per group (:class:`UsageFigures`), one row a group: what
    :func:`inference.rollups.drain` moved out of :class:`UsagePending`.

    The trigger on :class:`RequestLog` queues every insert and every update of a usage column
    (the late settlement replacing an ``abandoned`` row queues the difference) and the drain
    adds the queue to these rows, so with the queue they equal ``GROUP BY`` over the log
    exactly, whoever writes the log (the settlement, the sweeper, storage metering, the admin,
    tests). Deleting log rows (retention, dropped partitions) leaves the sums: usage outlives the
    calls' details. Readers read :class:`UsageDailyLive`.
    """

    class Meta:
        db_table = "inference_usage_daily"
        constraints = [
            # The drain's ON CONFLICT target; NULL project/key ids are one group each.
            models.UniqueConstraint(
                fields=[
                    "organization_id",
                    "day",
                    "project_id",
                    "api_key_id",
                    "model",
                    "vendor",
                    "endpoint",
                ],
                name="uniq_usage_daily_group",
                nulls_distinct=False,
            ),
        ]


class UsageDailyLive(UsageFigures):
    """What the usage pages, the management usage API and the usage exports read: the view
    ``inference_usage_daily_live``, :class:`UsageDaily`'s rows and :class:`UsagePending`'s
    (ids negated), which readers sum per group — exact to the last settled call, however far
    behind the drain is. A few rows a day a group plus the queue (a few seconds of calls),
    where the log would be every call."""

    class Meta:
        db_table = "inference_usage_daily_live"
        managed = False


class ResponseStatus(models.TextChoices):
    """A stored ``/v1/responses`` response's status, as OpenAI names it."""

    QUEUED = "queued", "Queued"
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    INCOMPLETE = "incomplete", "Incomplete"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class StoredResponse(models.Model):
    """A Responses API response kept for ``previous_response_id``, ``GET``, ``input_items`` and
    background polling (:mod:`inference.responses.store` reads and writes it on the hot path).

    Written synchronously after the call's settlement, before the answer leaves; scoped to the
    project of the key that made it (plain ids, as the request log). ``context`` is the
    conversation before this call's input (the chain of ``previous_response_id``, flattened:
    a later response never needs an earlier row), ``input_items`` this call's own input,
    ``body`` the ``response`` object as last rendered (its output, usage and ``infrai``).
    Deleted past ``INFRAI_RESPONSES_RETENTION_DAYS`` (:mod:`inference.tasks`)."""

    response_id = models.CharField(max_length=40)  # unique: Meta.constraints
    request_id = models.CharField(max_length=40)
    organization_id = models.BigIntegerField()
    project_id = models.BigIntegerField()
    api_key_id = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, choices=ResponseStatus.choices)
    background = models.BooleanField(default=False)
    cancel_requested = models.BooleanField(default=False)
    model = models.CharField(max_length=120, blank=True)
    context = models.JSONField(default=list, blank=True)
    input_items = models.JSONField(default=list, blank=True)
    body = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [BrinIndex(fields=["created_at"], name="storedresponse_created_brin")]
        constraints = [
            models.UniqueConstraint(fields=["response_id"], name="uniq_storedresponse_response"),
        ]

    def __str__(self) -> str:
        return self.response_id
