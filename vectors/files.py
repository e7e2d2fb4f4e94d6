"""Stored files (``/v1/files``): their bytes, the organization's quota, listing and reading.

Synchronous, like :mod:`vectors.services` (the API runs these in worker threads); found only
through the caller's ``project_id``.

**Where the bytes live.** A file is one metadata row (:class:`~vectors.models.StoredFile`,
what ``GET /v1/files`` lists) and its bytes in :class:`~vectors.models.StoredFileChunk` rows
of :data:`FILE_CHUNK_BYTES`, a table nothing lists: a listing cannot load contents, the content
endpoint streams one chunk at a time (memory bounded by one chunk, whatever the file's size),
and deleting the metadata row deletes its chunks in the same transaction (a cascade the
database runs without loading them). The alternatives were weighed:

- a filesystem or object store behind Django's storage API would take the bytes out of
  PostgreSQL, but the write is then outside the transaction that checks the quota and writes
  the row (an orphan file on every rollback, a row without bytes on a crash between the two),
  and ``make run``, the tests and every web host would need a shared directory or bucket;
- PostgreSQL large objects stream too, but are not deleted with their row (a trigger or a
  sweeper must ``lo_unlink`` them) and need a transaction open around every read.

Measured (2 shared cores, 1,000 files of 300 KB in one project, 300 MB of contents): the
listing of all 1,000 takes 108-128 ms with a Python memory peak (tracemalloc, server and SDK
client) of 2.0 MB; reading the same rows with their contents, as the listing did when the
bytes were a column of the listed table, took 2.9-3.4 s and 300.5 MB. A 24 MB file streams back
in 185-280 ms with a 2.3 MB peak. Writing 24 MB as chunk rows and committing takes 0.44-1.09 s
against 0.06-0.14 s for ``FileSystemStorage`` with an fsync: slower, but uploads are capped at
``INFRAI_MAX_UPLOAD_BYTES`` (25 MB) and rare next to reads, and the write stays inside the
transaction that checks the quota (docs/vector_store.md, "Files").

**Quota.** An organization keeps at most ``INFRAI_FILES_QUOTA_BYTES`` of files (all its
projects). An upload checks and writes under the organization's file lock, a PostgreSQL
transaction-level advisory lock (``pg_advisory_xact_lock``) held from reading what is stored
to the commit: concurrent uploads of one organization are checked one after another, each
against what the ones before it stored, so two cannot both take the last bytes. The lock is on
nothing else (not the wallet, which every call of the organization locks for its hold), and
deletes take it too. Storage is metered per project on :class:`~vectors.models.FileStorage`
(:mod:`vectors.metering`); an upload or a delete accrues that row at the old size before it
changes the size.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from config.errors import InvalidRequest, NotFound
from vectors import metering
from vectors.models import FileStorage, StoredFile, StoredFileChunk
from vectors.services import new_public_id, price_now

FILE_CHUNK_BYTES = 1 << 20  # migration 0003 cut existing files at the same size
MAX_PAGE = 10_000  # OpenAI's limit (and default) for GET /v1/files
# The advisory locks' first key: "vfil" (nothing else in the project takes advisory locks).
_LOCK_SPACE = 0x7666696C
_INSERT_BATCH = 4  # chunks per INSERT: a statement carries at most 4 MiB


def _lock_organization_files(organization_id: int) -> None:
    """Take the organization's file lock until the transaction ends (waiting for it)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_SPACE, organization_id % (1 << 31)]
        )


def organization_file_bytes(*, organization_id: int) -> int:
    """The bytes of every file the organization keeps (what its quota is checked against)."""
    total = FileStorage.objects.filter(organization_id=organization_id).aggregate(
        total=Sum("size_bytes")
    )["total"]
    return int(total or 0)


def _usage_change(*, organization_id: int, project_id: int, bytes_delta: int, files: int) -> None:
    """Accrue the project's file storage up to now at its old size, then change the size
    (under the organization's file lock)."""
    row, _ = FileStorage.objects.select_for_update().get_or_create(
        project_id=project_id, defaults={"organization_id": organization_id}
    )
    metering.accrue(row, now=timezone.now(), per_gb_day_nanos=price_now().per_gb_day_nanos)
    row.size_bytes += bytes_delta
    row.file_count += files
    row.save(update_fields=["accrued_storage", "metered_at", "size_bytes", "file_count"])


def _quota_exceeded(*, size: int, used: int, quota: int) -> InvalidRequest:
    return InvalidRequest(
        f"Storing this file ({size} bytes) would exceed the organization's file storage quota: "
        f"{used} of {quota} bytes are in use. Delete files to make room.",
        code="storage_quota_exceeded",
        param="file",
    )


def file_create(
    *, organization_id: int, project_id: int, filename: str, purpose: str, content: bytes
) -> StoredFile:
    """Store ``content`` as a new file of the project, within the organization's quota.

    One transaction under the organization's file lock: the quota check, the metadata row, the
    chunks and the project's metered size. Over the quota: 400 ``storage_quota_exceeded``
    (``param: file``) and nothing is written. The caller has already made sure the wallet can
    pay for storing the bytes (the upload's hold).
    """
    size = len(content)
    quota = int(settings.INFRAI_FILES_QUOTA_BYTES)
    if size > quota:  # never fits: refused without taking the lock
        used = organization_file_bytes(organization_id=organization_id)
        raise _quota_exceeded(size=size, used=used, quota=quota)
    view = memoryview(content)
    with transaction.atomic():
        _lock_organization_files(organization_id)
        used = organization_file_bytes(organization_id=organization_id)
        if used + size > quota:
            raise _quota_exceeded(size=size, used=used, quota=quota)
        stored = StoredFile.objects.create(
            organization_id=organization_id,
            project_id=project_id,
            public_id=new_public_id("file-"),
            filename=filename,
            purpose=purpose,
            bytes=size,
        )
        StoredFileChunk.objects.bulk_create(
            (
                StoredFileChunk(file=stored, seq=n, data=view[start : start + FILE_CHUNK_BYTES])
                for n, start in enumerate(range(0, size, FILE_CHUNK_BYTES))
            ),
            batch_size=_INSERT_BATCH,
        )
        _usage_change(
            organization_id=organization_id, project_id=project_id, bytes_delta=size, files=1
        )
    return stored


def file_delete(*, stored: StoredFile) -> None:
    """Delete the file, its bytes and its vector-store links; its bytes stop being charged
    from now (the project's storage is accrued up to now first). Deleting a file already gone
    changes nothing."""
    with transaction.atomic():
        _lock_organization_files(stored.organization_id)
        deleted, _ = StoredFile.objects.filter(pk=stored.pk).delete()
        if deleted:
            _usage_change(
                organization_id=stored.organization_id,
                project_id=stored.project_id,
                bytes_delta=-stored.bytes,
                files=-1,
            )


def file_find(*, project_id: int, file_id: str, param: str = "file_id") -> StoredFile:
    """The project's file ``file_id`` (its metadata), else 404 naming ``param``."""
    found = StoredFile.objects.filter(project_id=project_id, public_id=file_id).first()
    if found is None:
        raise NotFound(f"No such File object: {file_id}", code="not_found", param=param)
    return found


@dataclass(frozen=True, slots=True)
class FilePage:
    """One page of ``GET /v1/files``: metadata rows only."""

    files: list[StoredFile]
    has_more: bool


def files_page(
    *, project_id: int, limit: int, order: str, after: str | None, purpose: str | None
) -> FilePage:
    """The project's files in creation order (``order`` ``asc`` or ``desc``), ``limit`` of
    them after the file ``after`` (400 naming ``after`` when the project has no such file),
    only those of ``purpose`` when given. One query on ``(project, id)``; never reads a
    chunk."""
    rows = StoredFile.objects.filter(project_id=project_id)
    if purpose:
        rows = rows.filter(purpose=purpose)
    if after is not None:
        cursor = (
            StoredFile.objects.filter(project_id=project_id, public_id=after)
            .values_list("pk", flat=True)
            .first()
        )
        if cursor is None:
            raise InvalidRequest(f"No such File object: {after}", param="after")
        rows = rows.filter(pk__gt=cursor) if order == "asc" else rows.filter(pk__lt=cursor)
    found = list(rows.order_by("pk" if order == "asc" else "-pk")[: limit + 1])
    return FilePage(files=found[:limit], has_more=len(found) > limit)


def file_chunk(*, stored: StoredFile, seq: int) -> bytes | None:
    """Chunk ``seq`` of the file's bytes (``None`` past the last one, or once it is deleted)."""
    data = (
        StoredFileChunk.objects.filter(file_id=stored.pk, seq=seq)
        .values_list("data", flat=True)
        .first()
    )
    return None if data is None else bytes(data)


def file_content(*, stored: StoredFile) -> bytes:
    """The whole file (at most ``INFRAI_MAX_UPLOAD_BYTES``: attaching it to a vector store
    chunks all of its text)."""
    parts = StoredFileChunk.objects.filter(file_id=stored.pk).order_by("seq")
    return b"".join(bytes(d) for d in parts.values_list("data", flat=True).iterator())
