"""Prometheus metrics: what every process counts, and what is read once per scrape.

Counters and histograms live in this module and are moved by the request path's hooks
(:mod:`infra.observability`); each is a few dictionary look-ups and an addition, never a
database or Redis round trip. With ``PROMETHEUS_MULTIPROC_DIR`` set (the topology script and
the systemd units set it; it must be set before the process starts) every process writes its
values to files there and any process's ``/metrics`` reports the sum over all of them.

What costs a query is read only when Prometheus scrapes (:mod:`config.scrape`).
This module imports nothing of the apps: every layer may call the hooks that move these.
"""

from __future__ import annotations

import re

from prometheus_client import Counter, Histogram

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
    "Tokens billed, by model, vendor and direction (input, cached_input, cache_write, output,"
    " reasoning; cached_input and cache_write are parts of input, reasoning of output).",
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
    "Moves to the next candidate after a vendor failed, by the model that served the call.",
    ["model"],
)
CACHE_HITS = Counter(
    "infrai_cache_hits",
    "Calls answered from the exact response cache, by endpoint and model.",
    ["endpoint", "model"],
)
VENDOR_USAGE_DISAGREEMENTS = Counter(
    "infrai_vendor_usage_disagreements",
    "Calls whose vendor-reported usage was not billed as reported: absent, malformed or "
    "implausible against what the relay counted, or past the output cap; by vendor and the "
    "source billed instead (counted, capped). See docs/billing.md.",
    ["vendor", "source"],
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
