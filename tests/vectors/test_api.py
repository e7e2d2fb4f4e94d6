"""The spec's vector store endpoints end to end: the official SDK → live app → store, billed
on the ledger, tenant-scoped."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import openai
import pytest

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from inference.models import RequestLog
from tests.vectors.conftest import DIMENSIONS, EMBED_MODEL, word_vector
from vectors.metering import storage_meter
from vectors.models import Collection, StorageCharge, VectorItem

pytestmark = pytest.mark.usefixtures("words")
QUERY_NANOS = 10_000  # the seeded price of one search

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec"
SPEC_SNIPPET = """resp = client.embeddings.create(
    model="auto",
    input=["first document", "second document"],
)
vector = resp.data[0].embedding"""


def post(client: openai.OpenAI, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, body=body, cast_to=object)


def entries(request_id: str) -> list[int]:
    return list(
        LedgerEntry.objects.filter(request_id=request_id).values_list("amount_nanos", flat=True)
    )


@pytest.mark.skipif(not SPEC.exists(), reason="the specifications are beside the repository")
def test_spec_snippet_then_upsert_and_query_finds_the_right_neighbour_first(issue_key, client_for):
    spec = "\n".join(p.read_text() for p in sorted(SPEC.glob("*.md")))
    assert SPEC_SNIPPET + "\n# → feed straight into POST /v1/vector/upsert" in spec
    client = client_for(issue_key())
    namespace: dict[str, Any] = {"client": client}
    exec(SPEC_SNIPPET, namespace)
    resp, vector = namespace["resp"], namespace["vector"]
    assert len(vector) == DIMENSIONS

    up = post(client, "/vector/upsert", {
        "collection": "docs",
        "ids": ["doc-1", "doc-2"],
        "vectors": [d.embedding for d in resp.data],
        "metadata": [{"n": 1}, {"n": 2}],
    })  # fmt: skip
    assert (up["upserted"], up["dimensions"], up["vector_count"]) == (2, DIMENSIONS, 2)
    found = post(client, "/vector/query", {"collection": "docs", "vector": vector, "top_k": 2})
    assert [m["id"] for m in found["data"]] == ["doc-1", "doc-2"]
    assert found["data"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert found["data"][0]["metadata"] == {"n": 1}
    # The search is billed at the catalog's per-query price; the write is not (storage is).
    assert entries(found["infrai"]["request_id"]) == [-QUERY_NANOS]
    assert entries(up["infrai"]["request_id"]) == []
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_texts_are_embedded_billed_as_embeddings_and_found_by_text(issue_key, client_for):
    client = client_for(issue_key())
    up = post(client, "/vector/upsert", {
        "collection": "facts",
        "ids": ["mars", "tea", "rust"],
        "texts": [
            "Mars is the red planet of the solar system.",
            "Green tea is brewed from leaves of Camellia sinensis.",
            "Rust is a systems programming language with ownership.",
        ],
        "metadata": [{"topic": "space"}, {"topic": "food"}, {"topic": "code"}],
    })  # fmt: skip
    embedding_call = up["embedding"]["infrai"]["request_id"]
    assert up["embedding"]["model"] == EMBED_MODEL
    log = RequestLog.objects.get(request_id=embedding_call)
    assert log.endpoint == "embeddings" and log.cost_nanos > 0
    assert entries(embedding_call) == [-log.cost_nanos]

    found = post(client, "/vector/query", {"collection": "facts", "text": "which planet is red?"})
    assert found["data"][0]["id"] == "mars"
    assert found["data"][0]["text"].startswith("Mars is the red planet")
    only_food = post(client, "/vector/query", {
        "collection": "facts", "text": "red planet", "filter": {"topic": "food"},
    })  # fmt: skip
    assert [m["id"] for m in only_food["data"]] == ["tea"]

    deleted = post(client, "/vector/delete", {"collection": "facts", "ids": ["mars"]})
    assert deleted["deleted"] == 1
    again = post(client, "/vector/query", {"collection": "facts", "text": "red planet"})
    assert "mars" not in [m["id"] for m in again["data"]]


def test_collections_are_listed_created_and_deleted(issue_key, client_for):
    client = client_for(issue_key())
    made = post(client, "/vector/collections", {"name": "notes", "dimensions": 3})
    assert (made["name"], made["dimensions"], made["vector_count"]) == ("notes", 3, 0)
    listed = client.get("/vector/collections", cast_to=object)
    assert [c["name"] for c in listed["data"]] == ["notes"]
    with pytest.raises(openai.BadRequestError) as exc:
        post(client, "/vector/collections", {"name": "notes"})
    assert exc.value.body["param"] == "name"  # type: ignore[index]
    gone = client.delete("/vector/collections/notes", cast_to=object)
    assert gone["deleted"] is True
    assert not Collection.objects.filter(name="notes").exists()


def _error(exc: pytest.ExceptionInfo[openai.APIStatusError]) -> dict[str, Any]:
    body = exc.value.response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


def test_dimension_batch_and_metadata_errors_name_the_param_and_write_nothing(
    issue_key, client_for
):
    client = client_for(issue_key())
    post(client, "/vector/collections", {"name": "three", "dimensions": 3})
    cases = [
        ({"ids": ["a"], "vectors": [[1, 2]]}, "vectors[0]"),
        ({"ids": ["a", "b"], "vectors": [[1, 2, 3], [1, 2, 3, 4]]}, "vectors[1]"),
        ({"ids": [str(i) for i in range(1001)], "vectors": [[1, 2, 3]] * 1001}, "ids"),
        ({"ids": ["a"], "vectors": [[1, 2, 3]], "metadata": [{"x": "y" * 9000}]}, "metadata[0]"),
        ({"ids": ["a"], "vectors": [[1, 2, 3]], "metadata": ["text"]}, "metadata[0]"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as exc:
            post(client, "/vector/upsert", {"collection": "three", **extra})
        assert _error(exc)["param"] == param, extra
    with pytest.raises(openai.BadRequestError) as exc:
        post(client, "/vector/query", {"collection": "three", "vector": [1.0] * 4})
    assert _error(exc)["param"] == "vector"
    with pytest.raises(openai.BadRequestError) as exc:
        post(client, "/vector/query", {"collection": "three", "vector": [1, 2, 3], "top_k": 0})
    assert _error(exc)["param"] == "top_k"
    with pytest.raises(openai.NotFoundError) as exc:
        post(client, "/vector/query", {"collection": "nope", "vector": [1, 2, 3]})
    assert _error(exc)["param"] == "collection"
    assert not VectorItem.objects.exists()
    assert not LedgerEntry.objects.filter(kind=EntryKind.USAGE).exists()


def test_another_organization_sees_nothing_and_cannot_write(issue_key, client_for):
    acme = client_for(issue_key(org="acme"))
    other = client_for(issue_key(org="globex"))
    post(acme, "/vector/upsert", {"collection": "docs", "ids": ["secret"], "vectors": [[1, 0, 0]]})
    public_id = Collection.objects.get(name="docs").public_id

    assert other.get("/vector/collections", cast_to=object)["data"] == []
    for name in ("docs", public_id):
        with pytest.raises(openai.NotFoundError):
            post(other, "/vector/query", {"collection": name, "vector": [1, 0, 0]})
        with pytest.raises(openai.NotFoundError):
            post(other, "/vector/delete", {"collection": name, "ids": ["secret"]})
        with pytest.raises(openai.NotFoundError):
            other.delete(f"/vector/collections/{name}", cast_to=object)
    # A write under the same name lands in the other organization's own collection.
    post(other, "/vector/upsert", {"collection": "docs", "ids": ["mine"], "vectors": [[1, 0, 0]]})
    mine = post(other, "/vector/query", {"collection": "docs", "vector": [1, 0, 0]})
    assert [m["id"] for m in mine["data"]] == ["mine"]
    theirs = post(acme, "/vector/query", {"collection": "docs", "vector": [1, 0, 0]})
    assert [m["id"] for m in theirs["data"]] == ["secret"]
    assert Collection.objects.filter(name="docs").count() == 2


def test_an_empty_wallet_gets_402_and_nothing_is_written(issue_key, client_for):
    client = client_for(issue_key(credit_usd="0"))
    for body in (
        {"collection": "docs", "ids": ["a"], "vectors": [[1, 0, 0]]},
        {"collection": "docs", "ids": ["a"], "texts": ["hello world"]},
    ):
        with pytest.raises(openai.APIStatusError) as exc:
            post(client, "/vector/upsert", body)
        assert exc.value.status_code == 402
        assert _error(exc)["code"] == "insufficient_quota"
    assert not Collection.objects.exists() and not VectorItem.objects.exists()
    assert not Hold.objects.exists()


def _stored(client: openai.OpenAI, *, vectors: int) -> Collection:
    """The collection ``big`` holding ``vectors`` vectors, upserted through the API."""
    post(client, "/vector/upsert", {
        "collection": "big",
        "ids": [str(i) for i in range(vectors)],
        "vectors": [word_vector(f"document number {i}") for i in range(vectors)],
    })  # fmt: skip
    return Collection.objects.get(name="big")


def _last_metered_days_ago(collection: Collection, days: int) -> None:
    """Move ``collection``'s last storage metering ``days`` into the past."""
    earlier = collection.metered_at - dt.timedelta(days=days)
    Collection.objects.filter(pk=collection.pk).update(metered_at=earlier)


def test_storage_is_charged_per_gb_day_through_the_wallet(issue_key, client_for):
    collection = _stored(client_for(issue_key()), vectors=100)
    assert collection.size_bytes >= 100 * 4 * DIMENSIONS
    # A day later: a GB-day costs $0.10, so a day of these bytes costs size × 0.1 nano-USD.
    _last_metered_days_ago(collection, 1)
    charged = storage_meter()
    expected = collection.size_bytes * 100_000_000 // 1_000_000_000
    assert charged in (expected, expected + 1)
    charge = StorageCharge.objects.get(collection=collection)
    assert charge.charged_nanos == charged
    assert entries(charge.request_id) == [-charged]
    entry = LedgerEntry.objects.get(request_id=charge.request_id)
    assert entry.kind == EntryKind.USAGE and entry.project_id == collection.project_id
    log = RequestLog.objects.get(request_id=charge.request_id)
    assert (log.endpoint, log.cost_nanos) == ("vector.storage", charged)
    assert audit_findings().drift == []
    # The next run right after has (almost) nothing new to charge: no double charge.
    assert storage_meter() == 0
    assert StorageCharge.objects.count() == 1


def test_the_same_calls_work_on_the_pgvector_engine(issue_key, client_for, settings, pgvector_url):
    settings.INFRAI_VECTOR_ENGINE = "pgvector"
    settings.INFRAI_VECTOR_PG_URL = pgvector_url
    client = client_for(issue_key())
    post(client, "/vector/upsert", {
        "collection": "pg",
        "ids": ["mars", "tea"],
        "texts": ["Mars is the red planet.", "Green tea is brewed from leaves."],
        "metadata": [{"topic": "space"}, {"topic": "food"}],
    })  # fmt: skip
    assert Collection.objects.get(name="pg").engine == "pgvector"
    assert not VectorItem.objects.exists()  # the vectors live in the pgvector database
    found = post(client, "/vector/query", {"collection": "pg", "text": "the red planet"})
    assert found["data"][0]["id"] == "mars"
    food = post(
        client, "/vector/query", {"collection": "pg", "text": "red", "filter": {"topic": "food"}}
    )
    assert [m["id"] for m in food["data"]] == ["tea"]
    assert entries(found["infrai"]["request_id"]) == [-QUERY_NANOS]
    client.delete("/vector/collections/pg", cast_to=object)


def test_a_storage_charge_takes_only_what_the_wallet_has_and_records_the_rest(
    issue_key, client_for
):
    from billing.models import Wallet

    collection = _stored(client_for(issue_key()), vectors=50)
    wallet = Wallet.objects.get(organization_id=collection.organization_id)
    Wallet.objects.filter(pk=wallet.pk).update(balance_nanos=7)  # almost empty
    _last_metered_days_ago(collection, 30)
    assert storage_meter() == 7
    charge = StorageCharge.objects.get()
    assert charge.charged_nanos == 7 and charge.amount_nanos > 7  # the shortfall stays recorded
    wallet.refresh_from_db()
    assert (wallet.balance_nanos, wallet.held_nanos) == (0, 0)  # never an overdraft
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_an_empty_wallet_cannot_search_and_nothing_is_charged(issue_key, client_for):
    from billing.models import Wallet

    client = client_for(issue_key())
    post(client, "/vector/upsert", {"collection": "c", "ids": ["a"], "vectors": [[1, 0, 0]]})
    Wallet.objects.update(balance_nanos=0)
    with pytest.raises(openai.APIStatusError) as exc:
        post(client, "/vector/query", {"collection": "c", "vector": [1, 0, 0]})
    assert exc.value.status_code == 402
    assert Collection.objects.get(name="c").queries == 0
    assert not LedgerEntry.objects.filter(kind=EntryKind.USAGE).exists()
