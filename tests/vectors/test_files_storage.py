"""``/v1/files`` is metered storage: a funded wallet to upload, the organization's quota (also
under concurrent uploads), GB-days charged on the ledger, listings that never read contents,
and migration 0003 moving existing contents out of the listed table. The official SDK against
the live app throughout."""

from __future__ import annotations

import datetime as dt
import io
import threading
import time
import tracemalloc
from typing import Any

import openai
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from accounts.models import Project
from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry, Wallet
from inference.models import RequestLog
from tests.vectors.conftest import reseed_vector_price
from vectors import files
from vectors.metering import storage_meter
from vectors.models import FileStorage, StorageCharge, StoredFile, StoredFileChunk


@pytest.fixture(autouse=True)
def _priced(transactional_db: None) -> None:
    reseed_vector_price()


def _upload(client: openai.OpenAI, content: bytes, name: str = "f.bin") -> Any:
    return client.files.create(file=(name, io.BytesIO(content)), purpose="assistants")


def _error(exc: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    body = exc.value.body
    assert isinstance(body, dict)
    return body


def _back_date(project_id: int, days: int) -> None:
    """Move the project's file storage metering ``days`` into the past."""
    row = FileStorage.objects.get(project_id=project_id)
    earlier = dt.timedelta(days=days)
    FileStorage.objects.filter(pk=row.pk).update(
        metered_at=row.metered_at - earlier, charged_until=row.charged_until - earlier
    )


def test_an_empty_wallet_cannot_upload_and_nothing_is_stored(issue_key, client_for):
    client = client_for(issue_key(credit_usd="0"))
    assert Wallet.objects.get().balance_nanos == 0
    entries_before = LedgerEntry.objects.count()
    with pytest.raises(openai.APIStatusError) as exc:
        _upload(client, b"x" * 100_000)
    assert exc.value.status_code == 402
    assert _error(exc)["code"] == "insufficient_quota"
    assert not StoredFile.objects.exists() and not StoredFileChunk.objects.exists()
    assert not FileStorage.objects.exists()
    assert LedgerEntry.objects.count() == entries_before
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert list(client.files.list()) == []


def test_uploads_stop_at_the_organizations_quota_and_a_delete_makes_room(
    issue_key, client_for, settings
):
    settings.INFRAI_FILES_QUOTA_BYTES = 1_000
    client = client_for(issue_key(org="acme", project="one"))
    other_project = client_for(issue_key(org="acme", project="two"))
    content = bytes(range(256)) * 2 + b"tail"  # 516 bytes
    first = _upload(client, content)
    with pytest.raises(openai.BadRequestError) as exc:
        _upload(other_project, content)  # the quota is the organization's, all projects
    error = _error(exc)
    assert (error["code"], error["param"]) == ("storage_quota_exceeded", "file")
    assert "516 bytes" in error["message"] and "516 of 1000" in error["message"]
    assert StoredFile.objects.count() == 1
    assert client.files.content(first.id).read() == content  # streamed back intact

    assert client.files.delete(first.id).deleted is True
    assert not StoredFileChunk.objects.exists()  # the bytes go with the file
    assert FileStorage.objects.get(project__name="one").size_bytes == 0
    second = _upload(other_project, content)
    assert other_project.files.retrieve(second.id).bytes == len(content)
    with pytest.raises(openai.NotFoundError):
        client.files.content(first.id)


def test_two_concurrent_uploads_cannot_both_take_the_last_bytes(
    issue_key, client_for, settings, monkeypatch
):
    settings.INFRAI_FILES_QUOTA_BYTES = 1_000
    key = issue_key()
    read_usage = files.organization_file_bytes

    def slow_read(**kwargs: Any) -> int:
        used = read_usage(**kwargs)
        time.sleep(0.3)  # without the lock, both uploads would read 0 here and both pass
        return used

    monkeypatch.setattr(files, "organization_file_bytes", slow_read)
    outcomes: list[str] = []
    start = threading.Barrier(2)

    def upload() -> None:
        client = client_for(key)
        start.wait()
        try:
            _upload(client, b"y" * 600)
            outcomes.append("stored")
        except openai.BadRequestError as exc:
            outcomes.append(exc.body["code"])  # type: ignore[index]

    threads = [threading.Thread(target=upload) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["storage_quota_exceeded", "stored"]
    assert StoredFile.objects.count() == 1
    assert FileStorage.objects.get().size_bytes == 600


def test_stored_file_bytes_are_charged_per_gb_day_on_the_ledger(issue_key, client_for):
    client = client_for(issue_key())
    uploaded = _upload(client, b"z" * 100_000)
    # The upload itself charges nothing (a hold of one GB-day, settled at 0).
    assert not LedgerEntry.objects.filter(kind=EntryKind.USAGE).exists()
    project_id = StoredFile.objects.get(public_id=uploaded.id).project_id
    _back_date(project_id, days=1)
    charged = storage_meter()
    assert 10_000 <= charged <= 10_002  # 100,000 bytes × 1 day × 0.1 nano-USD (+ seconds)
    charge = StorageCharge.objects.get()
    assert charge.file_storage is not None and charge.collection is None
    assert charge.request_id.startswith("fst_") and charge.charged_nanos == charged
    entry = LedgerEntry.objects.get(request_id=charge.request_id)
    assert (entry.kind, entry.amount_nanos, entry.project_id) == (
        EntryKind.USAGE, -charged, project_id
    )  # fmt: skip
    assert entry.description.startswith("file storage ")
    log = RequestLog.objects.get(request_id=charge.request_id)
    assert (log.endpoint, log.cost_nanos) == ("files.storage", charged)
    assert FileStorage.objects.get().storage_charged_nanos == charged
    assert audit_findings().drift == []
    assert storage_meter() == 0  # nothing charged twice


def test_a_file_deleted_between_two_runs_is_charged_for_the_time_it_was_stored(
    issue_key, client_for
):
    client = client_for(issue_key())
    uploaded = _upload(client, b"z" * 100_000)
    _back_date(StoredFile.objects.get(public_id=uploaded.id).project_id, days=2)
    client.files.delete(uploaded.id)  # accrues the two days before the size drops to 0
    charged = storage_meter()
    assert 20_000 <= charged <= 20_002
    assert audit_findings().drift == []


def _many_files(project: Project, *, count: int, size: int) -> None:
    """``count`` files of ``size`` bytes each, written by SQL (seconds, not minutes)."""
    StoredFile.objects.bulk_create(
        StoredFile(
            organization_id=project.organization_id,
            project=project,
            public_id=f"file-bulk{n:05d}",
            filename=f"f{n}.txt",
            purpose="assistants" if n % 2 else "batch",
            bytes=size,
        )
        for n in range(count)
    )
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO vectors_storedfilechunk (file_id, seq, data)"
            " SELECT id, 0, convert_to(repeat('x', %s), 'UTF8') FROM vectors_storedfile",
            [size],
        )


def test_listing_a_thousand_large_files_reads_no_content_and_pages_with_after(
    issue_key, client_for
):
    client = client_for(issue_key())
    project = Project.objects.get()
    _many_files(project, count=1_000, size=300_000)  # 300 MB of contents

    client.files.list(limit=1)  # warm up: the first call builds the SDK's models
    tracemalloc.start()
    try:
        listed = list(client.files.list(limit=100))  # the SDK follows `after` to the end
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Server and client in this process: the peak of what the listing allocated in Python
    # (about 2 MB measured) stays far below one page's contents (100 × 300 KB = 30 MB), let
    # alone all of them (300 MB): only metadata is read.
    assert peak < 10 * 1024 * 1024, peak
    assert [f.id for f in listed] == [f"file-bulk{n:05d}" for n in reversed(range(1_000))]
    assert all(f.bytes == 300_000 for f in listed)

    page = client.files.list()  # OpenAI's default limit: 10,000, so one page
    assert (len(page.data), page.has_more) == (1_000, False)
    ascending = client.files.list(limit=3, order="asc", purpose="batch")
    assert [f.id for f in ascending.data] == ["file-bulk00000", "file-bulk00002", "file-bulk00004"]
    assert ascending.has_more is True
    raw = client.get("/files", cast_to=object, options={"params": {"limit": 2}})
    assert raw["first_id"] == "file-bulk00999" and raw["last_id"] == "file-bulk00998"  # type: ignore[index]
    for params, param in (({"limit": 0}, "limit"), ({"after": "file-nope"}, "after"),
                          ({"order": "up"}, "order")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as exc:
            client.get("/files", cast_to=object, options={"params": params})
        assert _error(exc)["param"] == param

    with CaptureQueriesContext(connection) as queries:
        files.files_page(
            project_id=project.pk, limit=10_000, order="desc", after=None, purpose=None
        )
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "storedfilechunk" not in sql and '"data"' not in sql


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def test_migration_0003_moves_existing_contents_into_chunks_and_back(issue_key):
    issue_key()
    project = Project.objects.get()
    content = b"ab" * (files.FILE_CHUNK_BYTES // 2) + b"rest"  # one chunk and 4 bytes
    _migrate(("vectors", "0002_seed_price"))
    try:
        with connection.cursor() as cur:
            for public_id, data in (("file-old", content), ("file-empty", b"")):
                cur.execute(
                    "INSERT INTO vectors_storedfile (organization_id, project_id, public_id,"
                    " filename, purpose, content, bytes, created_at)"
                    " VALUES (%s, %s, %s, 'a.txt', 'assistants', %s, %s, now())",
                    [project.organization_id, project.pk, public_id, data, len(data)],
                )
    finally:
        _migrate(("vectors", "0003_file_contents_and_metering"))
    old = StoredFile.objects.get(public_id="file-old")
    assert files.file_content(stored=old) == content
    assert StoredFileChunk.objects.filter(file=old).count() == 2
    assert files.file_content(stored=StoredFile.objects.get(public_id="file-empty")) == b""
    usage = FileStorage.objects.get(project=project)
    assert (usage.size_bytes, usage.file_count) == (len(content), 2)

    _migrate(("vectors", "0002_seed_price"))
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT content FROM vectors_storedfile WHERE public_id = 'file-old'")
            assert bytes(cur.fetchone()[0]) == content
    finally:
        _migrate(("vectors", "0003_file_contents_and_metering"))
