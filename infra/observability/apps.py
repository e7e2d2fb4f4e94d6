"""Starts tracing when the process starts (Django's ``ready``), if OTLP is configured."""

from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class ObservabilityConfig(AppConfig):
    name = "infra.observability"
    label = "observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from infra.observability import tracing

        tracing.configure(
            otlp_endpoint=settings.OTEL_EXPORTER_OTLP_ENDPOINT,
            service_name=settings.OTEL_SERVICE_NAME,
        )
