"""Celery tasks of the vector store and their beat schedule."""

from __future__ import annotations

from celery import shared_task

from vectors.metering import storage_meter
from vectors.services import collections_maintain


@shared_task(name="vectors.storage_meter", ignore_result=True)
def storage_meter_task() -> int:
    """:func:`vectors.metering.storage_meter` (beat, hourly): charge stored GB-days."""
    return storage_meter()


@shared_task(name="vectors.maintain", ignore_result=True)
def maintain_task() -> int:
    """:func:`vectors.services.collections_maintain` (beat, every 5 minutes): build the
    pgvector indexes of collections that grew large enough."""
    return collections_maintain()


BEAT_SCHEDULE = {
    "vectors.storage_meter": {"task": "vectors.storage_meter", "schedule": 3600.0},
    "vectors.maintain": {"task": "vectors.maintain", "schedule": 300.0},
}
