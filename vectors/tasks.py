"""Celery tasks of the vector store and their beat schedule."""

from __future__ import annotations

from celery import shared_task

from vectors.metering import storage_meter


@shared_task(name="vectors.storage_meter", ignore_result=True)
def storage_meter_task() -> int:
    """:func:`vectors.metering.storage_meter` (beat, hourly): charge stored GB-days."""
    return storage_meter()


BEAT_SCHEDULE = {
    "vectors.storage_meter": {"task": "vectors.storage_meter", "schedule": 3600.0},
}
