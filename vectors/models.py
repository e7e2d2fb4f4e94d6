"""The vector store's rows: prices, collections, the embedded engine's vectors, files.

Every collection belongs to one organization and one project; everything below it (vectors,
attached files, storage charges) is reached only through its collection, which the request
path looks up by the caller's project. Stored files belong to a project too: their metadata in
:class:`StoredFile`, their bytes in :class:`StoredFileChunk`, their metered size in
:class:`FileStorage`. Money is integer nano-USD.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils import timezone

from accounts.models import Organization, Project


class VectorPrice(models.Model):
    """The vector store's prices from ``effective_from`` on (a change is a new row, never an
    edit). ``per_gb_day_nanos``: storage of 10^9 bytes for 24 hours; ``per_query_nanos``: one
    search."""

    effective_from = models.DateTimeField(default=timezone.now, unique=True)
    per_gb_day_nanos = models.BigIntegerField()
    per_query_nanos = models.BigIntegerField()
    source = models.CharField(max_length=300)

    class Meta:
        ordering = ("-effective_from",)

    def __str__(self) -> str:
        return f"vector price from {self.effective_from:%Y-%m-%d}"


class Collection(models.Model):
    """A named set of vectors of one dimension in one project.

    ``name`` is what ``/v1/vector/*`` calls it (unique per project); an OpenAI vector store is
    a collection named by its ``public_id`` (``vs_…``) with the store's own name in ``title``.
    ``dimensions`` is fixed by creation or by the first write. ``embedding_model``: the model
    that embedded its texts (texts added later are embedded by the same model).
    ``size_bytes``/``vector_count`` are the engine's figures after the last write;
    ``accrued_storage``: storage cost not yet charged, in nano-USD × 86 400 × 10^9 (exact
    integer, see :mod:`vectors.metering`).
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    public_id = models.CharField(max_length=40, unique=True)
    name = models.CharField(max_length=64)
    title = models.CharField(max_length=256, blank=True)
    dimensions = models.PositiveIntegerField(null=True, blank=True)
    embedding_model = models.CharField(max_length=128, blank=True)
    engine = models.CharField(max_length=16)
    vector_count = models.BigIntegerField(default=0)
    size_bytes = models.BigIntegerField(default=0)
    version = models.BigIntegerField(default=0, help_text="Bumped on every write (caches).")
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    metered_at = models.DateTimeField(default=timezone.now)
    accrued_storage = models.DecimalField(max_digits=40, decimal_places=0, default=Decimal(0))
    storage_charged_nanos = models.BigIntegerField(default=0)
    queries = models.BigIntegerField(default=0)
    queries_charged_nanos = models.BigIntegerField(default=0)

    class Meta:
        ordering = ("name",)
        constraints = [
            models.UniqueConstraint(fields=("project", "name"), name="vector_collection_name_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.name}"


class VectorItem(models.Model):
    """One vector of the embedded engine: little-endian float32 bytes, metadata, text."""

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="items")
    item_id = models.CharField(max_length=256)
    vector = models.BinaryField()
    metadata = models.JSONField(default=dict, blank=True)
    text = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("collection", "item_id"), name="vector_item_id_uniq")
        ]

    def __str__(self) -> str:
        return self.item_id


class StoredFile(models.Model):
    """A file uploaded with ``POST /v1/files``: its metadata only (what ``GET /v1/files``
    lists). The bytes are :class:`StoredFileChunk` rows, read only by the content endpoint and
    by attaching the file to a vector store (see :mod:`vectors.files`)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    public_id = models.CharField(max_length=40, unique=True)
    filename = models.CharField(max_length=256)
    purpose = models.CharField(max_length=32)
    bytes = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=("project", "id"), name="vector_file_project_idx")]

    def __str__(self) -> str:
        return self.public_id


class StoredFileChunk(models.Model):
    """Bytes ``seq × FILE_CHUNK_BYTES`` onwards of one stored file (at most that many): the
    contents live here, out of the table that is listed, and are read a chunk at a time."""

    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="+")
    seq = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("file", "seq"), name="vector_file_chunk_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.file_id}#{self.seq}"


class FileStorage(models.Model):
    """The stored files of one project as storage is metered: their ``size_bytes`` (the sum
    of their ``bytes``) and the accrual, exactly as a collection's (``metered_at``,
    ``accrued_storage`` in nano-USD × 86 400 × 10^9, ``storage_charged_nanos``); uploads and
    deletes accrue it too, so ``charged_until`` says where the next charge's period starts.
    Its size changes only under the organization's file lock (:mod:`vectors.files`)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="+")
    size_bytes = models.BigIntegerField(default=0)
    file_count = models.BigIntegerField(default=0)
    metered_at = models.DateTimeField(default=timezone.now)
    accrued_storage = models.DecimalField(max_digits=40, decimal_places=0, default=Decimal(0))
    charged_until = models.DateTimeField(
        default=timezone.now, help_text="The end of the last charge's period."
    )
    storage_charged_nanos = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"files of project {self.project_id}"


class FileStatus(models.TextChoices):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class VectorStoreFile(models.Model):
    """A file attached to a vector store: its chunks are vectors ``<file id>#<n>``."""

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="files")
    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=16, choices=FileStatus.choices)
    chunks = models.PositiveIntegerField(default=0)
    usage_bytes = models.BigIntegerField(default=0)
    attributes = models.JSONField(default=dict, blank=True)
    chunking = models.JSONField(default=dict, blank=True)
    last_error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("collection", "file"), name="vector_store_file_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.collection_id}/{self.file_id}"


class StorageCharge(models.Model):
    """One storage charge of one collection, or of one project's stored files
    (``file_storage``), by the beat task's hold → settle.

    ``charged_nanos`` is ``None`` until the wallet was charged (a row left so is retried);
    ``amount_nanos - charged_nanos`` is what the wallet could not cover.
    """

    collection = models.ForeignKey(
        Collection, on_delete=models.SET_NULL, null=True, related_name="charges"
    )
    file_storage = models.ForeignKey(
        FileStorage, on_delete=models.SET_NULL, null=True, blank=True, related_name="charges"
    )
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    request_id = models.CharField(max_length=64, unique=True)
    amount_nanos = models.BigIntegerField()
    charged_nanos = models.BigIntegerField(null=True, blank=True)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.request_id
