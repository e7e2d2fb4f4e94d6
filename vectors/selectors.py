"""Reads of the vector store: for other apps (the dashboard) and for OpenAI's surface
(:mod:`vectors.openai_api`). Synchronous (the API runs them in worker threads)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q

from config.errors import NotFound
from vectors.models import Collection, FileStatus, VectorStoreFile


@dataclass(frozen=True, slots=True)
class CollectionRow:
    """One collection as the dashboard lists it; money in nano-USD."""

    project: str
    name: str
    title: str
    engine: str
    dimensions: int | None
    vector_count: int
    size_bytes: int
    queries: int
    storage_charged_nanos: int
    queries_charged_nanos: int

    @property
    def charged_nanos(self) -> int:
        return self.storage_charged_nanos + self.queries_charged_nanos


def collections_for_organization(
    *, organization_id: int, project_id: int | None = None
) -> list[CollectionRow]:
    """The organization's collections (one project's when ``project_id``), by project and
    name, with their size and what storage and queries were charged so far."""
    rows = Collection.objects.filter(organization_id=organization_id).select_related("project")
    if project_id is not None:
        rows = rows.filter(project_id=project_id)
    return [
        CollectionRow(
            project=c.project.name,
            name=c.name,
            title=c.title,
            engine=c.engine,
            dimensions=c.dimensions,
            vector_count=c.vector_count,
            size_bytes=c.size_bytes,
            queries=c.queries,
            storage_charged_nanos=c.storage_charged_nanos,
            queries_charged_nanos=c.queries_charged_nanos,
        )
        for c in rows.order_by("project__name", "name")
    ]


def store_file_counts(*, collection: Collection) -> dict[str, int]:
    """How many files ``collection`` holds (``total``) and how many are ``completed``,
    ``failed``, ``in_progress`` and ``cancelled`` (always 0: attaching is not cancellable);
    one query."""
    counts = VectorStoreFile.objects.filter(collection=collection).aggregate(
        total=Count("id"),
        completed=Count("id", filter=Q(status=FileStatus.COMPLETED)),
        failed=Count("id", filter=Q(status=FileStatus.FAILED)),
        in_progress=Count("id", filter=Q(status=FileStatus.IN_PROGRESS)),
    )
    return {**counts, "cancelled": 0}


def store_files_of(*, collection: Collection) -> list[VectorStoreFile]:
    """The files attached to ``collection``, each with its :class:`StoredFile` loaded."""
    return list(VectorStoreFile.objects.filter(collection=collection).select_related("file"))


def store_file_find(*, collection: Collection, file_id: str) -> VectorStoreFile:
    """The link of file ``file_id`` (a public id) to ``collection``, its file loaded; 404
    naming ``file_id`` when the file is not attached to it."""
    link = (
        VectorStoreFile.objects.filter(collection=collection, file__public_id=file_id)
        .select_related("file")
        .first()
    )
    if link is None:
        raise NotFound(
            f"No file {file_id} in vector store {collection.public_id}.", param="file_id"
        )
    return link
