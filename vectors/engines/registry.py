"""Which engine serves a collection: the names ``INFRAI_VECTOR_ENGINE`` may take, one instance
of each per process.

Two engines implement :class:`vectors.store.VectorStore`:

- :mod:`vectors.engines.embedded` (``embedded``, the default): vectors in the application's own
  database, exact cosine search in numpy — recall 1.0, fit for collections up to a few hundred
  thousand vectors per process.
- :mod:`vectors.engines.pgvector` (``pgvector``): PostgreSQL with the pgvector extension
  (``INFRAI_VECTOR_PG_URL``, by default the platform's database); an HNSW index per
  collection, metadata filters on ``jsonb``.

The dependency points one way: this module imports the engines, the engines import the value
types of :mod:`vectors.store`, and :mod:`vectors.store` imports neither.
"""

from __future__ import annotations

import functools

from django.conf import settings

from vectors.engines.embedded import EmbeddedStore
from vectors.engines.pgvector import PgVectorStore
from vectors.store import VectorStore

ENGINES = ("embedded", "pgvector")


@functools.cache
def _engine(name: str, pg_url: str) -> VectorStore:
    if name == "pgvector":
        return PgVectorStore(url=pg_url)
    return EmbeddedStore()


def store_for(name: str) -> VectorStore:
    """The engine named ``name`` (a collection keeps the engine it was created on); one
    instance per process and pgvector database. ``ValueError`` for a name not in
    :data:`ENGINES`."""
    if name not in ENGINES:
        raise ValueError(f"unknown vector engine {name!r}")
    return _engine(name, str(settings.INFRAI_VECTOR_PG_URL))


def default_engine() -> str:
    """The engine new collections are created on (``INFRAI_VECTOR_ENGINE``); ``ValueError``
    when the setting names none of :data:`ENGINES`."""
    name = str(settings.INFRAI_VECTOR_ENGINE)
    if name not in ENGINES:
        raise ValueError(f"INFRAI_VECTOR_ENGINE must be one of {sorted(ENGINES)}, not {name!r}")
    return name
