"""What ``/metrics`` reads when Prometheus scrapes, and the exposition itself.

An entry point (like :mod:`config.urls`): it reads the apps — circuit state per vendor (Redis),
open holds and their total (one aggregate query), the GPU backend's own numbers (its
``/metrics`` if it serves one, else its ``/stats`` JSON) — once per scrape, never per call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


# --- scrape time --------------------------------------------------------------------------------


class ScrapeCollector(Collector):
    """What is read when Prometheus scrapes, not per call (see the module docstring).

    Each part fails on its own: a database or backend that does not answer costs that part
    and an ``infrai_scrape_errors`` sample, never the whole scrape.
    """

    def collect(self) -> Iterable[Metric]:
        errors = GaugeMetricFamily(
            "infrai_scrape_errors", "Parts of this scrape that failed.", labels=["part"]
        )
        for part, collect in (
            ("circuits", _circuit_families),
            ("holds", _hold_families),
            ("audit", _audit_families),
            ("gpu_backend", _gpu_backend_families),
            ("replica", _replica_families),
            ("usage_queue", _usage_queue_families),
        ):
            try:
                yield from list(collect())
            except Exception:
                log.warning("metrics: could not collect %s", part, exc_info=True)
                errors.add_metric([part], 1)
        yield errors


def _circuit_families() -> Iterator[Metric]:
    from catalog import health
    from catalog.models import Vendor
    from catalog.types import CircuitState

    vendors = list(Vendor.objects.filter(enabled=True).values_list("name", flat=True))
    family = GaugeMetricFamily(
        "infrai_circuit_state",
        "1 for the vendor's current circuit state (closed, half_open, open), else 0.",
        labels=["vendor", "state"],
    )
    for vendor, vendor_health in sorted(health.health_of(vendors).items()):
        for state in CircuitState:
            family.add_metric([vendor, state.value], 1.0 if vendor_health.state is state else 0.0)
    yield family


def _hold_families() -> Iterator[Metric]:
    from django.db.models import Count, Sum

    from billing.models import Hold, HoldStatus

    agg = Hold.objects.filter(status=HoldStatus.OPEN).aggregate(
        n=Count("id"), total=Sum("amount_nanos")
    )
    yield GaugeMetricFamily("infrai_open_holds", "Wallet holds open now.", value=agg["n"] or 0)
    yield GaugeMetricFamily(
        "infrai_open_holds_nanos",
        "The total of the open holds, in nano-USD.",
        value=agg["total"] or 0,
    )


def _audit_families() -> Iterator[Metric]:
    from django.core.cache import cache

    from billing.audit import CHECKS
    from billing.tasks import AUDIT_RESULT_KEY

    result = cache.get(AUDIT_RESULT_KEY)
    if result is None:
        return
    family = GaugeMetricFamily(
        "infrai_billing_audit_findings",
        "Findings of the last billing audit per check (the billing.audit beat task, windowed, "
        "every 5 minutes; a finding of history stays until the daily full audit no longer "
        "finds it).",
        labels=["check"],
    )
    for check in CHECKS:
        family.add_metric([check], float(result["checks"].get(check, 0)))
    yield family
    yield GaugeMetricFamily(
        "infrai_billing_audit_timestamp_seconds",
        "When the last billing audit ran (Unix time).",
        value=float(result["at"]),
    )


def _usage_queue_families() -> Iterator[Metric]:
    from inference import rollups

    yield GaugeMetricFamily(
        "infrai_usage_queue_rows",
        "Settled calls' usage not yet moved into the daily rollups (beat drains it every few "
        "seconds; counted up to 1,000,000).",
        value=rollups.queued(),
    )


def _replica_families() -> Iterator[Metric]:
    """The read replica's state measured now (nothing without ``DATABASE_REPLICA_URL``)."""
    from django.conf import settings

    from infra import db_router

    state = db_router.replica_state(max_age_s=0)
    if state is None:
        return
    yield GaugeMetricFamily(
        "infrai_db_replica_up",
        "1 if the read replica answered as a standby.",
        value=1 if state.available else 0,
    )
    yield GaugeMetricFamily(
        "infrai_db_replica_reads",
        "1 while reads go to the replica, 0 while they go to the primary.",
        value=1 if state.usable(settings.INFRAI_REPLICA_MAX_LAG_S) else 0,
    )
    if state.lag_s is not None:
        yield GaugeMetricFamily(
            "infrai_db_replica_lag_seconds",
            "How far the read replica's replay is behind the primary (0 when caught up).",
            value=state.lag_s,
        )
    if state.lag_bytes is not None:
        yield GaugeMetricFamily(
            "infrai_db_replica_lag_bytes",
            "WAL the primary has written that the read replica has not replayed.",
            value=state.lag_bytes,
        )


def _gpu_backend_families() -> Iterator[Metric]:
    """The GPU backend's batch size, queue depth and tokens: its ``/metrics`` re-exported
    under an ``infrai_gpu_backend_`` prefix when it serves one, else its ``/stats`` JSON."""
    import httpx
    from django.conf import settings

    from catalog.selectors import credentials_value

    base = str(settings.INFRAI_GPU_BACKEND_URL).rstrip("/").removesuffix("/v1")
    token = credentials_value("INFRAI_GPU_BACKEND_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    up = GaugeMetricFamily("infrai_gpu_backend_up", "1 if the GPU backend answered this scrape.")
    with httpx.Client(timeout=2.0, headers=headers) as client:
        try:
            response = client.get(base + "/metrics")
            if response.status_code == 200 and "json" not in response.headers.get(
                "content-type", ""
            ):
                up.add_metric([], 1)
                yield up
                yield from _prefixed(response.text)
                return
            response = client.get(base + "/stats")
            response.raise_for_status()
        except httpx.HTTPError:
            up.add_metric([], 0)
            yield up
            return
    up.add_metric([], 1)
    yield up
    yield from _stats_families(response.json())


def _prefixed(text: str) -> Iterator[Metric]:
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("infrai_"):
            family.name = "infrai_gpu_backend_" + family.name.removeprefix("gpu_backend_")
            family.samples = [
                s._replace(name="infrai_gpu_backend_" + s.name.removeprefix("gpu_backend_"))
                for s in family.samples
            ]
        yield family


def _stats_families(stats: dict[str, Any]) -> Iterator[Metric]:
    """Gauges from the backend's ``/stats`` counters (the backend without ``/metrics``)."""
    chat = stats.get("chat") or {}
    embeddings = stats.get("embeddings") or {}
    numbers = {
        "chat_sequences": ("Chat sequences generated since the backend started.", chat),
        "chat_tokens_generated": ("Tokens generated since the backend started.", chat),
        "chat_max_batch_size": ("Largest decode batch so far.", chat),
        "chat_batched_steps": ("Decode steps that ran more than one sequence.", chat),
        "chat_decode_steps": ("Decode steps since the backend started.", chat),
    }
    for name, (help_text, source) in numbers.items():
        field = name.removeprefix("chat_")
        if field in source:
            yield GaugeMetricFamily(f"infrai_gpu_backend_{name}", help_text, value=source[field])
    for field, value in sorted(embeddings.items()):
        if isinstance(value, int | float):
            yield GaugeMetricFamily(
                f"infrai_gpu_backend_embeddings_{field}",
                f"Embedding batcher: {field}.",
                value=value,
            )


# --- exposition ---------------------------------------------------------------------------------


def multiprocess_dir() -> str:
    """The directory shared by every process's metric files ('' when single-process)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def exposition() -> bytes:
    """The text exposition of every metric: summed over all processes in multiprocess mode,
    plus the scrape-time collector (run once, in the process that answers)."""
    if multiprocess_dir():
        counted = CollectorRegistry()
        multiprocess.MultiProcessCollector(counted)
    else:
        counted = REGISTRY
    scraped = CollectorRegistry()
    scraped.register(ScrapeCollector())
    return generate_latest(counted) + generate_latest(scraped)


def mark_process_dead(pid: int) -> None:
    """Drop a stopped process's live gauges (call from the process manager; counters stay)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)
