"""The embedded engine: vectors in the application's database, exact search in numpy.

Rows are :class:`~vectors.models.VectorItem` (float32 little-endian bytes). A search loads the
collection once per write version into a normalised float32 matrix held by this process
(``_cache``, the CACHED_COLLECTIONS most recently searched) and scores every vector: exact
cosine search, so recall is 1.0. Memory per cached collection: 4 × dimensions bytes per vector
(150 MB for 100k × 384). Needs no server.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Count, Sum, TextField
from django.db.models.functions import Cast, Length

from vectors.models import VectorItem
from vectors.store import Item, Match, Stats

# Collections whose matrices a process keeps (least recently searched dropped first).
CACHED_COLLECTIONS = 32


@dataclass(frozen=True, slots=True)
class _Loaded:
    version: int
    ids: list[str]
    matrix: np.ndarray  # (n, d) float32, rows of unit length
    metadata: list[dict[str, Any]]
    texts: list[str]


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` with every row scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def top_k_cosine(
    matrix: np.ndarray, vector: Sequence[float], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices and cosine scores of the ``k`` rows of the unit-row ``matrix`` closest to
    ``vector``, best first (exact)."""
    q = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(q)) or 1.0
    scores = matrix @ (q / norm)
    k = min(k, scores.shape[0])
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.argsort(-scores[part], kind="stable")]
    return order, scores[order]


def matches_where(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` holds every key of ``where`` with an equal value."""
    return all(k in metadata and metadata[k] == v for k, v in where.items())


def stats_of(collection_id: int, dimensions: int) -> Stats:
    row = VectorItem.objects.filter(collection_id=collection_id).aggregate(
        n=Count("id"),
        text=Sum(Length("text")),
        meta=Sum(Length(Cast("metadata", TextField()))),
    )
    n = int(row["n"] or 0)
    return Stats(n, n * 4 * dimensions + int(row["text"] or 0) + int(row["meta"] or 0))


class EmbeddedStore:
    """:class:`~vectors.store.VectorStore` on the Django database with numpy search."""

    def __init__(self, max_cached: int = CACHED_COLLECTIONS) -> None:
        self._cache: OrderedDict[int, _Loaded] = OrderedDict()
        self._max_cached = max_cached
        self._lock = threading.Lock()

    def upsert(self, *, collection_id: int, dimensions: int, items: Sequence[Item]) -> Stats:
        rows = [
            VectorItem(
                collection_id=collection_id,
                item_id=item.id,
                vector=np.asarray(item.vector, dtype="<f4").tobytes(),
                metadata=item.metadata,
                text=item.text,
            )
            for item in items
        ]
        with transaction.atomic():
            VectorItem.objects.bulk_create(
                rows,
                batch_size=1000,
                update_conflicts=True,
                unique_fields=["collection", "item_id"],
                update_fields=["vector", "metadata", "text"],
            )
        self._cache.pop(collection_id, None)
        return stats_of(collection_id, dimensions)

    def _load(self, collection_id: int, dimensions: int, version: int) -> _Loaded:
        cached = self._cache.get(collection_id)
        if cached is not None and cached.version == version:
            with contextlib.suppress(KeyError):
                self._cache.move_to_end(collection_id)
            return cached
        with self._lock:
            cached = self._cache.get(collection_id)
            if cached is not None and cached.version == version:
                return cached
            rows = list(
                VectorItem.objects.filter(collection_id=collection_id)
                .order_by("id")
                .values_list("item_id", "vector", "metadata", "text")
            )
            matrix = np.zeros((len(rows), dimensions), dtype=np.float32)
            for i, row in enumerate(rows):
                matrix[i] = np.frombuffer(bytes(row[1]), dtype="<f4")
            loaded = _Loaded(
                version=version,
                ids=[r[0] for r in rows],
                matrix=unit_rows(matrix),
                metadata=[r[2] for r in rows],
                texts=[r[3] for r in rows],
            )
            self._cache[collection_id] = loaded
            while len(self._cache) > self._max_cached:  # least recently searched first
                self._cache.popitem(last=False)
            return loaded

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
        loaded = self._load(collection_id, dimensions, version)
        matrix, positions = loaded.matrix, None
        if where:
            positions = np.array(
                [i for i, m in enumerate(loaded.metadata) if matches_where(m, where)],
                dtype=np.int64,
            )
            matrix = matrix[positions]
        order, scores = top_k_cosine(matrix, vector, top_k)
        out = []
        for j, score in zip(order.tolist(), scores.tolist(), strict=True):
            i = int(positions[j]) if positions is not None else j
            out.append(Match(loaded.ids[i], float(score), loaded.metadata[i], loaded.texts[i]))
        return out

    def delete(
        self,
        *,
        collection_id: int,
        dimensions: int,
        ids: Sequence[str] | None,
        where: Mapping[str, Any],
    ) -> tuple[int, Stats]:
        rows = VectorItem.objects.filter(collection_id=collection_id)
        if ids is not None:
            rows = rows.filter(item_id__in=list(ids))
        if where:
            doomed = [
                pk for pk, meta in rows.values_list("pk", "metadata") if matches_where(meta, where)
            ]
            rows = VectorItem.objects.filter(pk__in=doomed)
        deleted, _ = rows.delete()
        self._cache.pop(collection_id, None)
        return deleted, stats_of(collection_id, dimensions)

    def maintain(self, *, collection_id: int, dimensions: int) -> None:
        """Nothing to keep up: every search is exact."""

    def drop(self, *, collection_id: int) -> None:
        VectorItem.objects.filter(collection_id=collection_id).delete()
        self._cache.pop(collection_id, None)
