"""The Batch API's records: a :class:`Batch` (OpenAI's batch object, its reservation and its
worker's lease) and its :class:`BatchLine` rows (one per line of the input file, with what
became of it). Written only by :mod:`batches.services`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import Organization, Project
from infra.jsonio import JsonbEncoder


class BatchStatus(models.TextChoices):
    """OpenAI's batch states: validating → in_progress → finalizing → completed; failed;
    expired; cancelling → cancelled."""

    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


#: States in which lines may still run.
RUNNABLE = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)
#: States a batch ends in.
FINAL = (BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED)


class LineStatus(models.TextChoices):
    PENDING = "pending"
    COMPLETED = "completed"  # answered 200 (in the output file)
    FAILED = "failed"  # answered with an error (in the error file)
    CANCELLED = "cancelled"  # never run: the batch was cancelled
    EXPIRED = "expired"  # never run: the completion window ended


class Batch(models.Model):
    """One ``POST /v1/batches``: the lines of ``input_file_id`` sent to ``endpoint``.

    ``reserved_nanos``: what the batch's hold (request id ``public_id``) reserved at submission,
    the sum of its lines' ``reserved_nanos``; ``spent_nanos``: what its lines were charged.
    ``lease_until``: a worker is running its lines until then (renewed per line).
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    api_key_id = models.BigIntegerField()
    public_id = models.CharField(max_length=40, unique=True)
    endpoint = models.CharField(max_length=40)
    input_file_id = models.CharField(max_length=40)
    output_file_id = models.CharField(max_length=40, blank=True, default="")
    error_file_id = models.CharField(max_length=40, blank=True, default="")
    completion_window = models.CharField(max_length=8, default="24h")
    status = models.CharField(
        max_length=12, choices=BatchStatus.choices, default=BatchStatus.VALIDATING
    )
    metadata = models.JSONField(null=True, blank=True, encoder=JsonbEncoder)
    errors = models.JSONField(null=True, blank=True, encoder=JsonbEncoder)
    reserved_nanos = models.BigIntegerField(default=0)
    spent_nanos = models.BigIntegerField(default=0)
    # What the lines consumed so far, summed as each is recorded (the batch object's
    # ``usage``): every prompt token, the cached part, every output token, the reasoning part.
    input_tokens = models.BigIntegerField(default=0, db_default=0)
    cached_input_tokens = models.BigIntegerField(default=0, db_default=0)
    output_tokens = models.BigIntegerField(default=0, db_default=0)
    reasoning_tokens = models.BigIntegerField(default=0, db_default=0)
    total = models.IntegerField(default=0)
    completed = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batches"
        indexes = [
            models.Index(fields=("project", "id"), name="batch_project_idx"),
            models.Index(fields=("status", "expires_at"), name="batch_status_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id


class BatchLine(models.Model):
    """Line ``number`` (1-based) of a batch's input file: its ``custom_id`` and validated
    ``body``, what its worst case reserved, and once run its call's request id, HTTP status,
    answer (``response_body``) or OpenAI error object (``error``), and cost."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    number = models.IntegerField()
    custom_id = models.CharField(max_length=512)
    body = models.JSONField(encoder=JsonbEncoder)
    reserved_nanos = models.BigIntegerField()
    status = models.CharField(max_length=10, choices=LineStatus.choices, default=LineStatus.PENDING)
    public_id = models.CharField(max_length=40, blank=True, default="")
    request_id = models.CharField(max_length=40, blank=True, default="")
    http_status = models.IntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True, encoder=JsonbEncoder)
    error = models.JSONField(null=True, blank=True, encoder=JsonbEncoder)
    cost_nanos = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("batch", "number"), name="batch_line_number_uniq"),
            models.UniqueConstraint(fields=("batch", "custom_id"), name="batch_line_custom_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.batch_id}#{self.number}"
