"""The Celery application (worker and beat: ``celery -A config worker`` / ``beat``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("infrai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
