"""Writes and reads of the vector store. Synchronous (the API runs them in worker threads).

Tenancy lives here: a collection is only ever found through ``project_id`` (the caller's key's
project), and the engines are only ever handed the id of a collection found that way.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from config.errors import InvalidRequest, NotFound
from vectors.engines.registry import default_engine, store_for
from vectors.models import Collection, FileStatus, StoredFile, VectorPrice, VectorStoreFile
from vectors.store import Item, Match, Stats, item_bytes

log = logging.getLogger(__name__)

# Metadata keys of a file's chunk vectors: the file they came from and its name.
FILE_ID = "_file_id"
FILENAME = "_filename"


def new_public_id(prefix: str) -> str:
    """``vs_…`` / ``file-…``: the prefix and 24 random hex characters."""
    return prefix + secrets.token_hex(12)


def price_now() -> VectorPrice:
    """The vector store's price in force now (the seed migration guarantees one)."""
    price = VectorPrice.objects.filter(effective_from__lte=timezone.now()).first()
    if price is None:
        raise RuntimeError("no vector store price in force (vectors migration 0002 seeds one)")
    return price


def collection_create(
    *,
    organization_id: int,
    project_id: int,
    name: str | None,
    dimensions: int | None = None,
    title: str = "",
    metadata: Mapping[str, Any] | None = None,
    embedding_model: str = "",
) -> Collection:
    """A new, empty collection on the default engine. ``name`` ``None``: named by its public
    id (an OpenAI vector store). 400 ``collection_exists`` (param ``name``) when the project
    already has one of that name."""
    public_id = new_public_id("vs_")
    try:
        with transaction.atomic():
            return Collection.objects.create(
                organization_id=organization_id,
                project_id=project_id,
                public_id=public_id,
                name=name or public_id,
                title=title,
                dimensions=dimensions,
                engine=default_engine(),
                metadata=dict(metadata or {}),
                embedding_model=embedding_model,
            )
    except IntegrityError:
        raise InvalidRequest(
            f"The project already has a collection named '{name}'.",
            code="collection_exists",
            param="name",
        ) from None


def collection_find(*, project_id: int, name: str, param: str = "collection") -> Collection:
    """The project's collection ``name`` (or public id), else 404 naming ``param``."""
    found = (
        Collection.objects.filter(project_id=project_id, name=name).first()
        or Collection.objects.filter(project_id=project_id, public_id=name).first()
    )
    if found is None:
        raise NotFound(f"No collection '{name}' in this project.", code="not_found", param=param)
    return found


def collection_find_or_create(*, organization_id: int, project_id: int, name: str) -> Collection:
    """The project's collection ``name``, created empty on first use (upsert creates)."""
    try:
        return collection_find(project_id=project_id, name=name)
    except NotFound:
        pass
    try:
        return collection_create(organization_id=organization_id, project_id=project_id, name=name)
    except InvalidRequest:  # created concurrently
        return collection_find(project_id=project_id, name=name)


def collections_of(*, project_id: int) -> list[Collection]:
    return list(Collection.objects.filter(project_id=project_id).order_by("created_at", "pk"))


def collection_update(
    *, collection: Collection, title: str | None, metadata: Mapping[str, Any] | None
) -> None:
    """Set the collection's ``title`` (cut to 256 characters) and ``metadata``, each left as
    it is when ``None``; saves both fields in one statement."""
    if title is not None:
        collection.title = title[:256]
    if metadata is not None:
        collection.metadata = dict(metadata)
    collection.save(update_fields=["title", "metadata"])


def embedding_model_pin(*, collection: Collection, model: str) -> None:
    """Pin ``model`` as the model the collection's texts are embedded with, when it has none
    yet (``model`` empty: nothing). First writer wins: a pin written meanwhile by another
    request stays, and ``collection`` itself is not refreshed."""
    if model and not collection.embedding_model:
        Collection.objects.filter(pk=collection.pk, embedding_model="").update(
            embedding_model=model
        )


def collection_delete(*, collection: Collection) -> None:
    """Delete the collection and its vectors (its storage charges stay, unlinked)."""
    store_for(collection.engine).drop(collection_id=collection.pk)
    collection.delete()


def _fix_dimensions(collection: Collection, dimensions: int, param: str) -> None:
    """Fix the collection's dimensions at ``dimensions`` if unset (first writer wins), else
    400 naming ``param`` when they differ."""
    if collection.dimensions is None:
        Collection.objects.filter(pk=collection.pk, dimensions__isnull=True).update(
            dimensions=dimensions
        )
        collection.refresh_from_db(fields=["dimensions"])
    if collection.dimensions != dimensions:
        raise InvalidRequest(
            f"'{param}' has {dimensions} dimensions; the collection holds vectors of "
            f"{collection.dimensions}.",
            code="invalid_value",
            param=param,
        )


def check_dimensions(collection: Collection, dimensions: int, param: str) -> None:
    """400 naming ``param`` unless vectors of ``dimensions`` fit the collection (read only)."""
    if collection.dimensions is not None and collection.dimensions != dimensions:
        raise InvalidRequest(
            f"'{param}' has {dimensions} dimensions; the collection holds vectors of "
            f"{collection.dimensions}.",
            code="invalid_value",
            param=param,
        )


def _record(collection: Collection, stats: Stats) -> None:
    Collection.objects.filter(pk=collection.pk).update(
        vector_count=stats.vector_count, size_bytes=stats.size_bytes, version=F("version") + 1
    )
    collection.vector_count, collection.size_bytes = stats.vector_count, stats.size_bytes


def vectors_write(
    *, collection: Collection, items: Sequence[Item], param: str = "vectors[0]"
) -> Stats:
    """Insert or replace ``items`` (all of one length, fixing the collection's dimensions on
    its first write); returns the stats after."""
    _fix_dimensions(collection, len(items[0].vector), param)
    assert collection.dimensions is not None
    stats = store_for(collection.engine).upsert(
        collection_id=collection.pk, dimensions=collection.dimensions, items=items
    )
    _record(collection, stats)
    return stats


def vectors_query(
    *, collection: Collection, vector: Sequence[float], top_k: int, where: Mapping[str, Any]
) -> list[Match]:
    """The best ``top_k`` matches (an empty collection has none)."""
    if collection.dimensions is None or collection.vector_count == 0:
        return []
    return store_for(collection.engine).query(
        collection_id=collection.pk,
        dimensions=collection.dimensions,
        vector=vector,
        top_k=top_k,
        where=where,
        version=collection.version,
    )


def vectors_delete(
    *, collection: Collection, ids: Sequence[str] | None, where: Mapping[str, Any]
) -> int:
    """Delete by ids and/or filter (both absent: everything); returns how many."""
    if collection.dimensions is None:
        return 0
    deleted, stats = store_for(collection.engine).delete(
        collection_id=collection.pk, dimensions=collection.dimensions, ids=ids, where=where
    )
    _record(collection, stats)
    return deleted


def query_counted(*, collection_id: int, charged_nanos: int) -> None:
    """Count one search and what it was charged on the collection (the dashboard's figures)."""
    Collection.objects.filter(pk=collection_id).update(
        queries=F("queries") + 1, queries_charged_nanos=F("queries_charged_nanos") + charged_nanos
    )


def collections_maintain() -> int:
    """Run every collection's engine upkeep (pgvector: index builds); returns how many
    collections were visited. One failing collection does not stop the others."""
    rows = Collection.objects.filter(dimensions__isnull=False).values_list(
        "pk", "engine", "dimensions"
    )
    visited = 0
    for pk, engine, dimensions in rows:
        try:
            store_for(engine).maintain(collection_id=pk, dimensions=int(dimensions or 0))
            visited += 1
        except Exception:
            log.exception("vector collection %s: upkeep failed; retried next run", pk)
    return visited


def store_file_begin(
    *,
    collection: Collection,
    stored: StoredFile,
    attributes: Mapping[str, Any],
    max_tokens: int,
    overlap: int,
) -> VectorStoreFile:
    """Link ``stored`` to ``collection`` as ``in_progress`` with its attributes and chunking
    (a file attached again starts over: its last error is cleared). The caller then ends the
    link with :func:`store_file_fail` or :func:`store_file_complete`."""
    link, _ = VectorStoreFile.objects.update_or_create(
        collection=collection,
        file=stored,
        defaults={
            "status": FileStatus.IN_PROGRESS,
            "attributes": dict(attributes),
            "chunking": {"max_chunk_size_tokens": max_tokens, "chunk_overlap_tokens": overlap},
            "last_error": None,
        },
    )
    return link


def store_file_fail(*, link: VectorStoreFile, message: str) -> None:
    """End ``link`` ``failed`` with ``last_error`` ``unsupported_file`` and ``message``."""
    link.status = FileStatus.FAILED
    link.last_error = {"code": "unsupported_file", "message": message}
    link.save()


def store_file_complete(
    *,
    collection: Collection,
    link: VectorStoreFile,
    file_id: str,
    items: Sequence[Item],
    embedding_model: str,
) -> None:
    """Replace the chunk vectors of file ``file_id`` (its public id, ``link``'s file) in
    ``collection`` with ``items`` (vectors embedded with ``embedding_model``, pinned on the
    collection if it has none) and end ``link`` ``completed`` with their count and bytes. 400
    naming ``file_id`` when the vectors do not fit the collection's dimensions. Not atomic:
    the caller runs it as the work of one metered call."""
    embedding_model_pin(collection=collection, model=embedding_model)
    vectors_delete(collection=collection, ids=None, where={FILE_ID: file_id})
    vectors_write(collection=collection, items=items, param="file_id")
    link.status, link.chunks = FileStatus.COMPLETED, len(items)
    link.usage_bytes = sum(item_bytes(item) for item in items)
    link.save()


def store_file_delete(*, collection: Collection, link: VectorStoreFile) -> None:
    """Detach ``link``'s file from ``collection``: its chunk vectors, then the link (the file
    itself stays)."""
    vectors_delete(collection=collection, ids=None, where={FILE_ID: link.file.public_id})
    link.delete()
