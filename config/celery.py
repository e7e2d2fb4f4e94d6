"""The Celery application (worker and beat: ``celery -A config worker`` / ``beat``).

Each app declares its periodic tasks as ``BEAT_SCHEDULE`` in its ``tasks`` module; they are
merged here, so beat (one per deployment) runs each exactly once per period.
"""

import os
from importlib import import_module
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_ready

# What the process was started with, before the default below: importing any ``config`` module
# runs this one, and a process that passes its environment on to other programs
# (``config.services run``) must not hand them this default as if it were the caller's choice.
SETTINGS_GIVEN = os.environ.get("DJANGO_SETTINGS_MODULE")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("infrai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

SCHEDULE_MODULES = (
    "catalog.tasks",
    "billing.tasks",
    "inference.tasks",
    "vectors.tasks",
    "batches.tasks",
)


@app.on_after_finalize.connect
def _merge_beat_schedules(sender: Celery, **kwargs: Any) -> None:
    for name in SCHEDULE_MODULES:
        module = import_module(name)  # each exists: a misspelt name fails the start, loudly
        sender.conf.beat_schedule.update(getattr(module, "BEAT_SCHEDULE", {}))


@worker_ready.connect
def _say_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """One line once the worker consumes tasks (``make run`` prints its readiness from it)."""
    print(f"worker ready ({getattr(sender, 'hostname', 'celery')})", flush=True)


@beat_init.connect
def _say_beat_ready(sender: Any = None, **kwargs: Any) -> None:
    """One line once beat schedules (``make run`` prints its readiness from it)."""
    print("beat ready", flush=True)
