"""The request log: one row per ``/v1`` call.

A call that held money has its row written with its settlement, in one transaction, before
the response ends (:func:`inference.settlement.finish`): a client that has read its answer
can see both. It is on the request path, not deferred.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.utils import timezone

from config.errors import ApiError
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
    and rows survive key deletion; the dashboard filters by ``organization_id`` first."""

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
        ]
        # Not unique=True on the field: PostgreSQL would add a LIKE-only index beside the
        # unique one, written on every call for queries nobody makes.
        constraints = [
            models.UniqueConstraint(fields=["request_id"], name="uniq_requestlog_request"),
        ]

    def __str__(self) -> str:
        return self.request_id


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
