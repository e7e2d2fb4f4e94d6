"""Both engines behind the store interface, on the same data: the embedded one on the test
database, pgvector on a real PostgreSQL with the extension (``pgserver``, started once per
session in a temporary directory, ~3 s)."""

from __future__ import annotations

import numpy as np
import pytest

from vectors.engines.embedded import EmbeddedStore
from vectors.engines.pgvector import PgVectorStore, index_name
from vectors.store import Item, VectorStore

DIMS = 16


@pytest.fixture(params=["embedded", "pgvector"])
def engine(request: pytest.FixtureRequest, db: None) -> VectorStore:
    if request.param == "embedded":
        return EmbeddedStore()
    return PgVectorStore(url=request.getfixturevalue("pgvector_url"))


def _collection(engine: VectorStore) -> int:
    """A collection id: a real row for the embedded engine (its items reference it)."""
    if isinstance(engine, EmbeddedStore):
        from accounts.models import Organization, Project
        from vectors.models import Collection

        org = Organization.objects.create(name="o", slug="o")
        project = Project.objects.create(organization=org, name="p")
        return Collection.objects.create(
            organization=org, project=project, public_id="vs_t", name="t", engine="embedded"
        ).pk
    return int(np.random.default_rng().integers(1, 2**40))


def test_query_returns_the_exact_neighbours_in_order_with_filters_and_deletes(engine):
    cid = _collection(engine)
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((200, DIMS)).astype(np.float32)
    items = [
        Item(id=f"v{i}", vector=vectors[i].tolist(), metadata={"parity": i % 2}, text=f"t{i}")
        for i in range(200)
    ]
    stats = engine.upsert(collection_id=cid, dimensions=DIMS, items=items)
    assert stats.vector_count == 200 and stats.size_bytes > 200 * 4 * DIMS

    q = vectors[42] + 0.01 * rng.standard_normal(DIMS).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    exact = np.argsort(-(unit @ (q / np.linalg.norm(q))))[:5]
    found = engine.query(
        collection_id=cid, dimensions=DIMS, vector=q.tolist(), top_k=5, where={}, version=1
    )
    assert found[0].id == "v42" and found[0].text == "t42" and found[0].metadata == {"parity": 0}
    assert [m.id for m in found] == [f"v{i}" for i in exact]
    assert found[0].score == pytest.approx(float((unit @ (q / np.linalg.norm(q)))[42]), abs=1e-4)

    odd = engine.query(
        collection_id=cid, dimensions=DIMS, vector=q.tolist(), top_k=5, where={"parity": 1},
        version=1,
    )  # fmt: skip
    assert len(odd) == 5 and all(m.metadata["parity"] == 1 for m in odd)

    # Upsert replaces by id; delete by id and by filter.
    engine.upsert(
        collection_id=cid, dimensions=DIMS,
        items=[Item(id="v42", vector=(-vectors[42]).tolist(), metadata={"parity": 0})],
    )  # fmt: skip
    again = engine.query(
        collection_id=cid, dimensions=DIMS, vector=q.tolist(), top_k=1, where={}, version=2
    )
    assert again[0].id != "v42"
    deleted, after = engine.delete(collection_id=cid, dimensions=DIMS, ids=["v1", "v2"], where={})
    assert deleted == 2 and after.vector_count == 198
    deleted, after = engine.delete(
        collection_id=cid, dimensions=DIMS, ids=None, where={"parity": 1}
    )
    assert deleted == 99 and after.vector_count == 99
    engine.drop(collection_id=cid)
    assert (
        engine.query(
            collection_id=cid, dimensions=DIMS, vector=q.tolist(), top_k=3, where={}, version=3
        )
        == []
    )


def test_pgvector_searches_through_the_collections_hnsw_index(pgvector_url):
    import psycopg

    store = PgVectorStore(url=pgvector_url)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((300, DIMS)).astype(np.float32)
    store.upsert(
        collection_id=77, dimensions=DIMS,
        items=[Item(id=str(i), vector=v.tolist()) for i, v in enumerate(vectors)],
    )  # fmt: skip
    assert store.build_index(collection_id=77, dimensions=DIMS) is True
    assert store.build_index(collection_id=77, dimensions=DIMS) is False  # once
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index_name(77)]
        ).fetchone()
        assert indexes is not None and "hnsw" in indexes[0] and "vector(16)" in indexes[0]
        conn.execute("ANALYZE infrai_vector_items")
        # 300 rows: the planner would rather sort them; make it show the index can serve.
        for scan in ("seqscan", "bitmapscan", "sort"):
            conn.execute(f"SET enable_{scan} = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT item_id FROM infrai_vector_items WHERE collection_id = 77"
                f" ORDER BY embedding::vector({DIMS}) <=> %s::vector({DIMS}) LIMIT 5",
                ["[" + ",".join(["0.1"] * DIMS) + "]"],
            )
        )
    assert index_name(77) in plan
    store.drop(collection_id=77)


def test_the_embedded_engine_keeps_only_the_most_recently_searched_collections(db):
    store = EmbeddedStore(max_cached=2)
    ids = [_collection_named(f"c{i}") for i in range(3)]
    for cid in ids:
        store.upsert(collection_id=cid, dimensions=2, items=[Item(id="a", vector=[1.0, 0.0])])
        store.query(collection_id=cid, dimensions=2, vector=[1, 0], top_k=1, where={}, version=0)
    assert list(store._cache) == ids[1:]
    # A write elsewhere bumps the version: the next search reloads and sees it.
    store.upsert(collection_id=ids[2], dimensions=2, items=[Item(id="b", vector=[0.0, 1.0])])
    found = store.query(
        collection_id=ids[2], dimensions=2, vector=[0, 1], top_k=1, where={}, version=1
    )
    assert found[0].id == "b"


def _collection_named(name: str) -> int:
    from accounts.models import Organization, Project
    from vectors.models import Collection

    org, _ = Organization.objects.get_or_create(name="o", slug="o")
    project, _ = Project.objects.get_or_create(organization=org, name="p")
    return Collection.objects.create(
        organization=org, project=project, public_id=f"vs_{name}", name=name, engine="embedded"
    ).pk


def test_upkeep_builds_the_pgvector_index_once_a_collection_is_large(pgvector_url, monkeypatch):
    from vectors.engines import pgvector as engine_module

    monkeypatch.setattr(engine_module, "INDEX_MIN_VECTORS", 50)
    store = PgVectorStore(url=pgvector_url)
    rows = np.random.default_rng(3).standard_normal((60, DIMS)).astype(np.float32)
    store.upsert(collection_id=88, dimensions=DIMS, items=[Item(id="a", vector=rows[0].tolist())])
    store.maintain(collection_id=88, dimensions=DIMS)  # 1 vector: no index yet
    assert store.build_index(collection_id=88, dimensions=DIMS) is True  # it was not there
    store.drop(collection_id=88)
    store.upsert(
        collection_id=88, dimensions=DIMS,
        items=[Item(id=str(i), vector=v.tolist()) for i, v in enumerate(rows)],
    )  # fmt: skip
    store.maintain(collection_id=88, dimensions=DIMS)
    assert store.build_index(collection_id=88, dimensions=DIMS) is False  # upkeep built it
    store.drop(collection_id=88)
