"""Celery tasks of the Batch API and their beat schedule."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from batches import runner, services


@shared_task(name=services.RUN_TASK, ignore_result=True)
def run_batch_task(public_id: str) -> int:
    """Run the batch's lines (:func:`batches.runner.run`); returns how many ran."""
    return runner.run_sync(public_id)


def batch_sweep() -> int:
    """Queue a worker for every batch no worker holds (:func:`batches.services.batches_due`:
    never started, its worker gone, cancelling, past its window) — with eager Celery (tests,
    a shell) run each here, to its end; returns how many batches."""
    due = services.batches_due()
    for public_id in due:
        if settings.CELERY_TASK_ALWAYS_EAGER:
            runner.run_sync(public_id)
        else:
            run_batch_task.delay(public_id)
    return len(due)


@shared_task(name="batches.sweep", ignore_result=True)
def batch_sweep_task() -> int:
    """:func:`batch_sweep` (beat, every minute)."""
    return batch_sweep()


BEAT_SCHEDULE = {"batches.sweep": {"task": "batches.sweep", "schedule": 60.0}}
