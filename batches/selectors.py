"""Reads of the Batch API: one batch of a project, and a project's batches page by page."""

from __future__ import annotations

from dataclasses import dataclass

from batches.models import Batch
from config.errors import NotFound


def batch_find(*, project_id: int, batch_id: str) -> Batch:
    """The project's batch ``batch_id``, else 404 naming ``batch_id``."""
    found = Batch.objects.filter(project_id=project_id, public_id=batch_id).first()
    if found is None:
        raise NotFound(f"No batch found with id '{batch_id}'.", code="not_found", param="batch_id")
    return found


@dataclass(frozen=True, slots=True)
class BatchPage:
    batches: list[Batch]
    has_more: bool


def batches_page(*, project_id: int, limit: int, after: str | None) -> BatchPage:
    """The project's batches, newest first, ``limit`` of them after the batch ``after`` (a
    batch id; 404 naming ``after`` when the project has none of that id)."""
    rows = Batch.objects.filter(project_id=project_id).order_by("-pk")
    if after:
        cursor = Batch.objects.filter(project_id=project_id, public_id=after).first()
        if cursor is None:
            raise NotFound(f"No batch found with id '{after}'.", code="not_found", param="after")
        rows = rows.filter(pk__lt=cursor.pk)
    found = list(rows[: limit + 1])
    return BatchPage(batches=found[:limit], has_more=len(found) > limit)
