"""OpenAI's vector-store surface through the official SDK: files → vector store → search."""

from __future__ import annotations

import io

import openai
import pytest

from billing.models import LedgerEntry
from inference.models import RequestLog
from vectors.models import Collection, VectorItem

pytestmark = pytest.mark.usefixtures("words")

HANDBOOK = """Vacation policy. Every employee gets twenty-five days of paid vacation per year.
Vacation days are requested in the HR portal at least two weeks ahead, approved by the manager,
and up to five unused vacation days carry over into the first quarter of the next year.

Expense policy. Receipts for travel expenses must be filed within thirty days of the trip.
Hotel costs are reimbursed up to the city rate, meals up to the daily allowance, and flights
in economy class unless the trip lasts longer than eight hours, then premium economy.

Security policy. Laptops must use full disk encryption and a screen lock after five minutes.
Passwords live in the company password manager, hardware keys are required for single sign-on,
and a lost device is reported to the security team within one hour of noticing it.
"""
SMALL_CHUNKS = {
    "type": "static",
    "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0},
}


def test_files_vector_stores_and_search_work_with_the_sdk(issue_key, client_for):
    client = client_for(issue_key())
    uploaded = client.files.create(
        file=("handbook.txt", io.BytesIO(HANDBOOK.encode())), purpose="assistants"
    )
    assert uploaded.id.startswith("file-") and uploaded.bytes == len(HANDBOOK.encode())
    assert uploaded.filename == "handbook.txt" and uploaded.purpose == "assistants"

    store = client.vector_stores.create(name="Handbook")
    assert store.id.startswith("vs_") and store.name == "Handbook"
    attached = client.vector_stores.files.create(
        vector_store_id=store.id,
        file_id=uploaded.id,
        attributes={"team": "hr"},
        chunking_strategy=SMALL_CHUNKS,
    )
    assert attached.status == "completed" and attached.vector_store_id == store.id
    assert VectorItem.objects.filter(collection__public_id=store.id).count() == 3

    results = client.vector_stores.search(
        vector_store_id=store.id, query="How many vacation days do employees get?"
    )
    first = results.data[0]
    assert first.file_id == uploaded.id and first.filename == "handbook.txt"
    assert "twenty-five days of paid vacation" in first.content[0].text
    assert first.attributes == {"team": "hr"}
    assert results.data[0].score >= results.data[-1].score

    filtered = client.vector_stores.search(
        vector_store_id=store.id,
        query="vacation",
        filters={"type": "eq", "key": "team", "value": "sales"},
    )
    assert filtered.data == []

    # Embedding the chunks and the queries was billed as embeddings; each search as a query.
    logs = RequestLog.objects.filter(endpoint="embeddings")
    assert logs.count() == 3 and all(log.cost_nanos > 0 for log in logs)
    for log in logs:
        assert LedgerEntry.objects.get(request_id=log.request_id).amount_nanos == -log.cost_nanos
    searches = RequestLog.objects.filter(endpoint="vector.query")
    assert searches.count() == 2
    assert sum(LedgerEntry.objects.filter(request_id__in=searches.values("request_id")).values_list(
        "amount_nanos", flat=True)) == -2 * 10_000  # fmt: skip

    fetched = client.vector_stores.retrieve(store.id)
    assert fetched.file_counts.completed == 1 and fetched.usage_bytes > 0
    renamed = client.vector_stores.update(store.id, name="HR handbook", metadata={"v": "2"})
    assert (renamed.name, renamed.metadata) == ("HR handbook", {"v": "2"})
    assert [s.id for s in client.vector_stores.list()] == [store.id]
    assert [f.id for f in client.vector_stores.files.list(vector_store_id=store.id)] == [
        uploaded.id
    ]
    client.vector_stores.files.delete(file_id=uploaded.id, vector_store_id=store.id)
    assert not VectorItem.objects.exists()
    assert client.vector_stores.delete(store.id).deleted is True
    assert not Collection.objects.exists()


def test_another_organization_cannot_see_or_use_a_vector_store(issue_key, client_for):
    owner = client_for(issue_key(org="acme"))
    other = client_for(issue_key(org="globex"))
    uploaded = owner.files.create(file=("a.txt", io.BytesIO(b"secret plans")), purpose="assistants")
    store = owner.vector_stores.create(name="private", file_ids=[uploaded.id])
    assert store.file_counts.completed == 1

    assert list(other.vector_stores.list()) == [] and list(other.files.list()) == []
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.retrieve(store.id)
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.search(vector_store_id=store.id, query="secret plans")
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(uploaded.id)
    theirs = other.files.create(file=("b.txt", io.BytesIO(b"mine")), purpose="assistants")
    with pytest.raises(openai.NotFoundError):
        other.vector_stores.files.create(vector_store_id=store.id, file_id=theirs.id)
    mine = other.vector_stores.create(name="mine")
    with pytest.raises(openai.NotFoundError) as exc:
        other.vector_stores.files.create(vector_store_id=mine.id, file_id=uploaded.id)
    assert exc.value.body["param"] == "file_id"  # type: ignore[index]
    assert VectorItem.objects.filter(collection__public_id=mine.id).count() == 0


def test_a_file_that_is_not_text_fails_with_last_error(issue_key, client_for):
    client = client_for(issue_key())
    uploaded = client.files.create(
        file=("blob.bin", io.BytesIO(b"\xff\xfe\x00binary")), purpose="assistants"
    )
    store = client.vector_stores.create(name="s")
    attached = client.vector_stores.files.create(vector_store_id=store.id, file_id=uploaded.id)
    assert attached.status == "failed" and attached.last_error.code == "unsupported_file"
    with pytest.raises(openai.BadRequestError) as exc:
        client.vector_stores.search(vector_store_id=store.id, query="x", max_num_results=51)
    assert exc.value.body["param"] == "max_num_results"  # type: ignore[index]
