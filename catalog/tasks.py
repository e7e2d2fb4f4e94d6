"""Periodic catalog work for Celery beat (merged by :mod:`config.celery`).

Beat runs once per deployment, so each vendor is probed once per period, not once per process.
"""

from __future__ import annotations

from celery import shared_task

from catalog.services import vendors_probe_all

PROBE_PERIOD_S = 60.0

BEAT_SCHEDULE = {
    "catalog-probe-vendors": {"task": "catalog.probe_vendors", "schedule": PROBE_PERIOD_S},
}


@shared_task(name="catalog.probe_vendors", ignore_result=True)
def probe_vendors() -> dict[str, str]:
    """GET every enabled vendor's ``/models``: feeds health and the verified model lists."""
    return {r.vendor: r.error or f"{len(r.models or ())} models" for r in vendors_probe_all()}
