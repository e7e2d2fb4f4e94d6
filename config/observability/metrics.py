"""Prometheus metrics: what every process counts, and what is read once per scrape.

Counters and histograms live in this module and are moved by the request path's hooks
(:mod:`config.observability.hooks`); each is a few dictionary look-ups and an addition, never a
database or Redis round trip. With ``PROMETHEUS_MULTIPROC_DIR`` set (the topology script and
the systemd units set it; it must be set before the process starts) every process writes its
values to files there and any process's ``/metrics`` reports the sum over all of them.

What costs a query is read only when Prometheus scrapes, by :class:`ScrapeCollector`: circuit
state per vendor (Redis), open holds and their total (one aggregate query), and the GPU
backend's own numbers (its ``/metrics`` if it serves one, else its ``/stats`` JSON).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# Seconds. Non-streamed calls are mostly under a second; streams run for minutes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)

HTTP_REQUESTS = Counter(
    "infrai_http_requests",
    "HTTP requests served on /v1, by endpoint, method and status.",
    ["endpoint", "method", "status"],
)
HTTP_DURATION = Histogram(
    "infrai_http_request_duration_seconds",
    "Time from the request's arrival to the response's last byte (a whole stream), /v1.",
    ["endpoint", "method", "status"],
    buckets=LATENCY_BUCKETS,
)
CALLS = Counter(
    "infrai_calls",
    "Calls that reached an outcome (one per request-log row), by endpoint, model, vendor, "
    "status (ok, client_error, vendor_error, cancelled) and HTTP status.",
    ["endpoint", "model", "vendor", "status", "http_status"],
)
TTFT = Histogram(
    "infrai_time_to_first_token_seconds",
    "Time from the request's arrival to the first token sent (streams).",
    ["model", "vendor"],
    buckets=TTFT_BUCKETS,
)
TOKENS = Counter(
    "infrai_tokens",
    "Tokens billed, by model, vendor and direction (input, cached_input, output).",
    ["model", "vendor", "direction"],
)
COST = Counter(
    "infrai_cost_nanos",
    "Cost charged to wallets, in nano-USD (1e-9 USD), by model and vendor.",
    ["model", "vendor"],
)
VENDOR_ERRORS = Counter(
    "infrai_vendor_errors",
    "Vendor attempts that failed (connect error, timeout, 429, 5xx, loading), by vendor and kind.",
    ["vendor", "kind"],
)
FAILOVERS = Counter(
    "infrai_failovers",
    "Moves to the next candidate after a vendor failed, by requested model's served model.",
    ["model"],
)
CACHE_HITS = Counter(
    "infrai_cache_hits",
    "Calls answered from the exact response cache, by endpoint and model.",
    ["endpoint", "model"],
)
RATE_LIMITED = Counter(
    "infrai_rate_limit_refusals",
    "Calls refused with 429 by a key's rate limits, by endpoint.",
    ["endpoint"],
)

_ENDPOINT_WORD = re.compile(r"^[a-z]+(?:[._][a-z]+)*$")


def endpoint_label(path: str, status: int) -> str:
    """A bounded label for a ``/v1`` path: literal words kept, ids replaced by ``{id}``,
    anything answered 404 or 405 collapsed to ``other`` (random paths must not add series)."""
    if status in (404, 405):
        return "other"
    parts = [
        p if p in ("", "v1") or (_ENDPOINT_WORD.match(p) and len(p) <= 24) else "{id}"
        for p in path.split("/")
    ]
    return "/".join(parts[:6])


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
            ("gpu_backend", _gpu_backend_families),
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


def _gpu_backend_families() -> Iterator[Metric]:
    """The GPU backend's batch size, queue depth and tokens: its ``/metrics`` re-exported
    under an ``infrai_gpu_backend_`` prefix when it serves one, else its ``/stats`` JSON."""
    import httpx
    from django.conf import settings

    base = str(settings.INFRAI_GPU_BACKEND_URL).rstrip("/").removesuffix("/v1")
    token = os.environ.get("INFRAI_GPU_BACKEND_TOKEN", "")
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
