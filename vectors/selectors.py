"""Reads of the vector store for other apps (the dashboard)."""

from __future__ import annotations

from dataclasses import dataclass

from vectors.models import Collection


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
