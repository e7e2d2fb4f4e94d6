"""Metrics, traces and structured logs for operators (issue 17; ``docs/deploy.md``).

The request path calls the hooks below, one line each; all logic lives here. Every hook is
cheap — counter increments in this process's memory (or its multiprocess file), a log line,
and span work only while tracing is on — and none makes a database or Redis round trip.

- :func:`observe_v1` wraps the ``/v1`` ASGI app: request count and latency per endpoint and
  status, and the call's root span.
- :func:`call_finished` runs once per call with its request-log row: calls, tokens, cost,
  time to first token, cache hits, failovers, rate-limit refusals, the JSON log line, and the
  end of the vendor span.
- :func:`vendor_failed` counts a vendor attempt that failed (before a failover).
- :func:`vendor_usage_disagreed` counts a call billed on something else than its vendor's
  usage report.
- :func:`traced` / :func:`vendor_call` decorate the steps that get a span.

This package (but :mod:`~config.probes` and :mod:`~config.scrape`,
entry points that read the apps at scrape time) sits in the ``config`` layer: it imports no app.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from infra.observability import logs, metrics, tracing
from infra.observability.tracing import traced, vendor_call


class CallRow(Protocol):
    """What the hooks read of a request-log row (``inference.models.RequestLog``); typed here
    so this module imports nothing above ``config`` and every layer may call it."""

    request_id: str
    organization_id: int
    project_id: int | None
    endpoint: str
    model: str
    vendor: str
    status: str
    http_status: int
    error_code: str
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_nanos: int
    latency_ms: int
    ttft_ms: int | None
    stream: bool
    cache_hit: bool
    failovers: int


class CallRequest(Protocol):
    """What the hooks read of a ``/v1`` request (``inference.http.ApiRequest``)."""

    headers: dict[str, str]
    state: dict[str, Any]


__all__ = [
    "call_finished",
    "observe_v1",
    "stream_ended",
    "traced",
    "vendor_call",
    "vendor_failed",
    "vendor_usage_disagreed",
]


def observe_v1(app: Any) -> Any:
    """``app`` (the ``/v1`` ASGI app) counted and timed per endpoint, method and status, and
    run inside the request's root span when tracing is on."""

    async def observed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = time.perf_counter()
        seen: dict[str, Any] = {"status": 500, "request_id": "", "done": False}

        async def watch(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                seen["status"] = message["status"]
                if root is not None:
                    for name, value in message.get("headers") or ():
                        if name == b"x-request-id":
                            seen["request_id"] = value.decode("latin-1")
            elif kind == "http.response.body" and not message.get("more_body"):
                _count(scope, seen, started)
            await send(message)

        root = tracing.new_root(scope)
        try:
            if root is None:
                await app(scope, receive, watch)
            else:
                with root.activate():
                    await app(scope, receive, watch)
        finally:
            _count(scope, seen, started)
            if root is not None:
                root.end(
                    status=seen["status"],
                    route=metrics.endpoint_label(scope["path"], seen["status"]),
                    request_id=seen["request_id"],
                )

    return observed


def _count(scope: dict[str, Any], seen: dict[str, Any], started: float) -> None:
    if seen["done"]:
        return
    seen["done"] = True
    status = seen["status"]
    labels = (metrics.endpoint_label(scope["path"], status), scope["method"], str(status))
    metrics.HTTP_REQUESTS.labels(*labels).inc()
    metrics.HTTP_DURATION.labels(*labels).observe(time.perf_counter() - started)


def call_finished(row: CallRow, request: CallRequest) -> None:
    """Count, log and trace one call that reached its outcome (``row`` is its request-log
    row, about to be written)."""
    model, vendor = row.model, row.vendor
    metrics.CALLS.labels(row.endpoint, model, vendor, row.status, str(row.http_status)).inc()
    if row.http_status == 429:
        metrics.RATE_LIMITED.labels(row.endpoint).inc()
    if row.cache_hit:
        metrics.CACHE_HITS.labels(row.endpoint, model).inc()
    if row.failovers:
        metrics.FAILOVERS.labels(model).inc(row.failovers)
    if row.input_tokens or row.output_tokens:
        tokens = metrics.TOKENS
        tokens.labels(model, vendor, "input").inc(row.input_tokens)
        tokens.labels(model, vendor, "output").inc(row.output_tokens)
        if row.cached_input_tokens:
            tokens.labels(model, vendor, "cached_input").inc(row.cached_input_tokens)
        if row.cache_write_tokens:
            tokens.labels(model, vendor, "cache_write").inc(row.cache_write_tokens)
        if row.reasoning_tokens:
            tokens.labels(model, vendor, "reasoning").inc(row.reasoning_tokens)
    if row.cost_nanos:
        metrics.COST.labels(model, vendor).inc(row.cost_nanos)
    if row.ttft_ms is not None:
        metrics.TTFT.labels(model, vendor).observe(row.ttft_ms / 1000)
    fields = {
        "request_id": row.request_id,
        "organization_id": row.organization_id,
        "project_id": row.project_id,
        "key_prefix": logs.key_prefix(request.headers.get("authorization")),
        "endpoint": row.endpoint,
        "model": model,
        "vendor": vendor,
        "status": str(row.status),
        "http_status": row.http_status,
        "error_code": row.error_code,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_nanos": row.cost_nanos,
        "latency_ms": row.latency_ms,
        "ttft_ms": row.ttft_ms,
        "stream": row.stream,
        "cache_hit": row.cache_hit,
        "failovers": row.failovers,
    }
    logs.emit(fields)
    if tracing.enabled():
        tracing.call_finished(
            request.state,
            {
                "infrai.request_id": row.request_id,
                "infrai.organization_id": row.organization_id,
                "infrai.status": str(row.status),
                "infrai.cost_nanos": row.cost_nanos,
                "gen_ai.provider.name": vendor,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": row.input_tokens,
                "gen_ai.usage.output_tokens": row.output_tokens,
                "infrai.vendor": vendor,
            },
            error=row.status != "ok",
        )


def vendor_failed(vendor: str, kind: str) -> None:
    """A vendor attempt failed (connect error, timeout, 429, 5xx, loading) and the call moves
    on to the next candidate, if any."""
    metrics.VENDOR_ERRORS.labels(vendor, kind).inc()
    tracing.vendor_attempt_failed(vendor, kind)


def vendor_usage_disagreed(vendor: str, source: str) -> None:
    """A call is billed on ``source`` (``counted``, ``capped``) instead of what ``vendor``
    reported (or did not report)."""
    metrics.VENDOR_USAGE_DISAGREEMENTS.labels(vendor, str(source)).inc()


def stream_ended(request: CallRequest, meter: object) -> None:
    """A stream is about to be settled: its finish reasons (what a chat meter saw) go to its
    vendor span. Nothing happens while tracing is off."""
    if tracing.enabled():
        reasons = getattr(meter, "finish_reasons", None)
        if isinstance(reasons, dict):
            tracing.stream_reasons(request.state, reasons.values())
