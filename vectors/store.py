"""The store interface: what the vector store needs from an engine, and the values it trades.

The engines (:mod:`vectors.engines.embedded`, :mod:`vectors.engines.pgvector`) implement
:class:`VectorStore` with these values; which one serves a collection is
:mod:`vectors.engines.registry`. This module imports no engine: the dependency points one way.

An engine knows collections only by their numeric id: tenancy is decided before it is called
(the caller's project owns the :class:`~vectors.models.Collection`). Scores are cosine
similarities in [-1, 1], best first. A filter is a mapping of top-level metadata keys to the
values they must equal (all of them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Metadata = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Item:
    """One vector to write: its id in the collection, values, metadata and optional text."""

    id: str
    vector: Sequence[float]
    metadata: Metadata = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    """One search result."""

    id: str
    score: float
    metadata: Metadata
    text: str


@dataclass(frozen=True, slots=True)
class Stats:
    """A collection's size as stored: vectors and bytes (vector values + metadata + text)."""

    vector_count: int
    size_bytes: int


def item_bytes(item: Item) -> int:
    """The bytes ``item`` is billed as: 4 per dimension plus its metadata JSON and text."""
    return 4 * len(item.vector) + len(json.dumps(item.metadata).encode()) + len(item.text.encode())


class VectorStore(Protocol):
    """What an engine does. Every method is synchronous (callers run it in a worker thread)
    and touches only the collection ``collection_id``."""

    def upsert(self, *, collection_id: int, dimensions: int, items: Sequence[Item]) -> Stats:
        """Insert or replace ``items`` (by id); returns the collection's stats after."""
        ...

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
        """The ``top_k`` best matches among the vectors whose metadata matches ``where``.
        ``version`` is the collection's write counter (an engine may cache by it)."""
        ...

    def delete(
        self,
        *,
        collection_id: int,
        dimensions: int,
        ids: Sequence[str] | None,
        where: Mapping[str, Any],
    ) -> tuple[int, Stats]:
        """Delete the vectors named in ``ids`` (all when ``None``) that match ``where``;
        returns how many and the stats after."""
        ...

    def drop(self, *, collection_id: int) -> None:
        """Remove the collection's vectors and any index of it."""
        ...

    def maintain(self, *, collection_id: int, dimensions: int) -> None:
        """Background upkeep (pgvector: build the collection's index once it is large)."""
        ...
