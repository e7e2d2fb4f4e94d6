"""The PostgreSQL + pgvector engine: one table, an HNSW index per collection, jsonb filters.

Vectors live in ``infrai_vector_items`` of the database at ``INFRAI_VECTOR_PG_URL`` (empty: the
platform's own database, through Django's connection). The column is an untyped ``vector``, so
one table holds every dimension; a collection of INDEX_MIN_VECTORS or more gets a partial HNSW
index on ``embedding::vector(d)`` (cosine) restricted to its rows, which the search's
``ORDER BY … <=> …`` uses; it is built by :meth:`PgVectorStore.maintain` (a beat task, off the
request path: building on 100k vectors takes minutes, and inserts into an HNSW graph are far
slower than plain inserts). Smaller collections are searched exactly. A metadata filter is
``metadata @> filter`` (a GIN index on
``jsonb_path_ops``); with pgvector ≥ 0.8 an iterative index scan keeps filtered searches from
coming back short (before it, a filtered search scans exactly). The schema is created on first
use (``CREATE EXTENSION vector`` needs the extension installed on the server).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction

from vectors.store import Item, Match, Stats

TABLE = "infrai_vector_items"
# HNSW build and search parameters (pgvector's defaults are m=16, ef_construction=64, ef=40).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
# A collection gets its index (vectors.tasks, off the request path) from this many vectors on.
INDEX_MIN_VECTORS = 10_000
BUILD_MEMORY = "1GB"  # maintenance_work_mem of an index build: the graph should fit in it
_SCHEMA = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        collection_id bigint NOT NULL,
        item_id text NOT NULL,
        embedding vector NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{{}}',
        text text NOT NULL DEFAULT '',
        PRIMARY KEY (collection_id, item_id))""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_metadata ON {TABLE} USING gin (metadata jsonb_path_ops)",
]


def ef_search(top_k: int) -> int:
    """HNSW's candidate list for a search of ``top_k`` (``INFRAI_VECTOR_HNSW_EF_SEARCH``, at
    least twice ``top_k``): higher finds more of the true neighbours, slower."""
    return max(int(settings.INFRAI_VECTOR_HNSW_EF_SEARCH), 2 * int(top_k))


def vector_literal(values: Sequence[float]) -> str:
    """pgvector's text form of ``values`` (``[1,2,3]``), float32 precision."""
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def index_name(collection_id: int) -> str:
    return f"{TABLE}_hnsw_{int(collection_id)}"


class PgVectorStore:
    """:class:`~vectors.store.VectorStore` on PostgreSQL with pgvector."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._local = threading.local()
        self._ready = False
        self._iterative = False

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        """A cursor on the vector database, in one transaction (Django's connection when no
        URL; else this thread's own connection)."""
        if not self._url:
            with transaction.atomic(), connection.cursor() as cur:
                yield cur
            return
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self._url, autocommit=True)
            self._local.conn = conn
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def _ensure_schema(self, cur: Any) -> None:
        if self._ready:
            return
        for statement in _SCHEMA:
            cur.execute(statement)
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = tuple(int(p) for p in cur.fetchone()[0].split(".")[:2])
        self._iterative = version >= (0, 8)
        self._ready = True

    def build_index(self, *, collection_id: int, dimensions: int) -> bool:
        """Build the collection's HNSW index unless it exists; returns whether it was built.
        Slow for large collections (minutes for 100k × 384): called off the request path."""
        with self._cursor() as cur:
            self._ensure_schema(cur)
            cur.execute(
                "SELECT 1 FROM pg_indexes WHERE indexname = %s", [index_name(collection_id)]
            )
            if cur.fetchone() is not None:
                return False
            cur.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
            cur.execute(
                f"CREATE INDEX IF NOT EXISTS {index_name(collection_id)} ON {TABLE} USING hnsw "
                f"((embedding::vector({int(dimensions)})) vector_cosine_ops) "
                f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) "
                f"WHERE collection_id = {int(collection_id)}"
            )
            cur.execute(f"ANALYZE {TABLE}")  # so the planner knows the collection is large
            return True

    def maintain(self, *, collection_id: int, dimensions: int) -> None:
        """Build the HNSW index once the collection holds INDEX_MIN_VECTORS vectors (below
        that an exact scan is fast, and writes before the index exist are ~20× faster)."""
        with self._cursor() as cur:
            self._ensure_schema(cur)
            count = self._stats(cur, collection_id, dimensions).vector_count
        if count >= INDEX_MIN_VECTORS:
            self.build_index(collection_id=collection_id, dimensions=dimensions)

    def _stats(self, cur: Any, collection_id: int, dimensions: int) -> Stats:
        cur.execute(
            f"SELECT count(*), coalesce(sum(octet_length(metadata::text) + octet_length(text)), 0)"
            f" FROM {TABLE} WHERE collection_id = %s",
            [collection_id],
        )
        n, extra = cur.fetchone()
        return Stats(int(n), int(n) * 4 * dimensions + int(extra))

    def upsert(self, *, collection_id: int, dimensions: int, items: Sequence[Item]) -> Stats:
        with self._cursor() as cur:
            self._ensure_schema(cur)
            cur.executemany(
                f"INSERT INTO {TABLE} (collection_id, item_id, embedding, metadata, text)"
                " VALUES (%s, %s, %s::vector, %s::jsonb, %s)"
                " ON CONFLICT (collection_id, item_id) DO UPDATE SET"
                " embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata,"
                " text = EXCLUDED.text",
                [
                    (
                        collection_id,
                        item.id,
                        vector_literal(item.vector),
                        json.dumps(item.metadata),
                        item.text,
                    )
                    for item in items
                ],
            )
            return self._stats(cur, collection_id, dimensions)

    def query(
        self,
        *,
        collection_id: int,
        dimensions: int,
        vector: Sequence[float],
        top_k: int,
        where: Mapping[str, Any],
        version: int,
    ) -> list[Match]:
        d = int(dimensions)
        literal = vector_literal(vector)
        sql = (
            f"SELECT item_id, 1 - (embedding::vector({d}) <=> %(q)s::vector({d})), metadata, text"
            f" FROM {TABLE} WHERE collection_id = %(c)s"
            + (" AND metadata @> %(w)s::jsonb" if where else "")
            + f" ORDER BY embedding::vector({d}) <=> %(q)s::vector({d}) LIMIT %(k)s"
        )
        with self._cursor() as cur:
            self._ensure_schema(cur)
            cur.execute(f"SET LOCAL hnsw.ef_search = {ef_search(top_k)}")
            exact = bool(where) and not self._iterative
            if self._iterative:
                cur.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            elif exact:
                # Before 0.8 the index filters after its ef_search candidates: a selective
                # filter could come back short, so a filtered search scans exactly.
                cur.execute("SET LOCAL enable_indexscan = off")
            cur.execute(sql, {"q": literal, "c": collection_id, "w": json.dumps(where), "k": top_k})
            rows = cur.fetchall()
        return [
            Match(
                id=r[0],
                score=float(r[1]),
                metadata=r[2] if isinstance(r[2], dict) else json.loads(r[2]),
                text=r[3],
            )
            for r in rows
        ]

    def delete(
        self,
        *,
        collection_id: int,
        dimensions: int,
        ids: Sequence[str] | None,
        where: Mapping[str, Any],
    ) -> tuple[int, Stats]:
        sql = f"DELETE FROM {TABLE} WHERE collection_id = %(c)s"
        if ids is not None:
            sql += " AND item_id = ANY(%(ids)s)"
        if where:
            sql += " AND metadata @> %(w)s::jsonb"
        with self._cursor() as cur:
            self._ensure_schema(cur)
            cur.execute(sql, {"c": collection_id, "ids": list(ids or []), "w": json.dumps(where)})
            deleted = cur.rowcount
            return int(deleted), self._stats(cur, collection_id, dimensions)

    def drop(self, *, collection_id: int) -> None:
        with self._cursor() as cur:
            self._ensure_schema(cur)
            cur.execute(f"DELETE FROM {TABLE} WHERE collection_id = %s", [collection_id])
            cur.execute(f"DROP INDEX IF EXISTS {index_name(collection_id)}")
