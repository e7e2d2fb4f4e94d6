"""The Django project package (named ``config``: a ``platform`` package would shadow the stdlib)."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
