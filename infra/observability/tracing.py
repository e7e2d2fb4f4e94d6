"""OpenTelemetry traces: one span per ``/v1`` call, children for its steps.

Off unless configured: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, :func:`configure` (run once
per process when Django starts) installs the SDK with the OTLP/HTTP exporter (which reads the
standard ``OTEL_*`` variables for headers, timeouts and the service name) and the Django,
aiohttp-client, httpx and psycopg instrumentations. Otherwise :data:`_tracer` stays ``None``
and every decorator here costs one attribute check. Tests install an in-memory exporter with
:func:`install`.

The tree of a call (see ``docs/deploy.md``)::

    POST /v1/chat/completions          (server; http.*, infrai.request_id, infrai.organization_id)
    ├── infrai.auth                    (the key lookup)
    ├── infrai.route                   (routing decision)
    ├── infrai.hold                    (the wallet hold)
    ├── chat test-large                (client; GenAI semantic conventions, one per call, failed
    │                                   attempts as events; for a stream it lasts the stream)
    └── infrai.settle                  (request-log row + settlement, one transaction)
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

F = TypeVar("F", bound=Callable[..., Any])

# The tracer of this process, or None when tracing is off (the decorators' fast path).
_tracer: trace.Tracer | None = None
_instrumented = False
# Keys in ``ApiRequest.state`` (only written while tracing is on).
VENDOR_SPAN = "otel.vendor_span"
FINISH_REASONS = "otel.finish_reasons"


def enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _tracer is not None


def configure(*, otlp_endpoint: str, service_name: str = "infrai") -> bool:
    """Install the SDK with the OTLP/HTTP exporter when ``otlp_endpoint`` is set (no-op
    otherwise, and on a second call). Returns whether tracing is on."""
    if not otlp_endpoint or _tracer is not None:
        return enabled()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def install(provider: TracerProvider, *, libraries: bool = True) -> None:
    """Record spans through ``provider`` from now on (tests pass one with an in-memory
    exporter); ``libraries`` also instruments Django, the HTTP clients (aiohttp for vendor
    calls, httpx for the rest), psycopg (the ORM) and asyncpg (the hot path's money statements:
    ``infra.adb``), once per process."""
    global _tracer, _instrumented
    _tracer = provider.get_tracer("infrai")
    if libraries and not _instrumented:
        _instrumented = True
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        DjangoInstrumentor().instrument(tracer_provider=provider)
        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
        AioHttpClientInstrumentor().instrument(tracer_provider=provider)
        PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
        AsyncPGInstrumentor().instrument(tracer_provider=provider)


def uninstall() -> None:
    """Stop recording (tests); library instrumentation stays (it follows the provider)."""
    global _tracer
    _tracer = None


def traced(name: str) -> Callable[[F], F]:
    """Run the decorated function (sync or async) in a span ``name`` that is a child of the
    current one; when tracing is off, call it straight through."""

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                tracer = _tracer
                if tracer is None:
                    return await fn(*args, **kwargs)
                with tracer.start_as_current_span(name):
                    return await fn(*args, **kwargs)

            return cast(F, run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            tracer = _tracer
            if tracer is None:
                return fn(*args, **kwargs)
            with tracer.start_as_current_span(name):
                return fn(*args, **kwargs)

        return cast(F, run)

    return decorate


def _operation(endpoint: str) -> str:
    """The GenAI operation name of an endpoint (``chat.completions`` → ``chat``)."""
    if endpoint.startswith("chat"):
        return "chat"
    if endpoint.startswith("embeddings"):
        return "embeddings"
    if endpoint.startswith("responses"):
        return "chat"
    return endpoint.split(".")[0] or "call"


def vendor_call(fn: F) -> F:
    """Decorates :func:`inference.stages.call_vendor`: a client span following the GenAI
    semantic conventions.

    It is ended by :func:`call_finished` once usage is known: at the time the vendor answered
    for a complete answer, at the end of the stream for a stream.
    """

    @functools.wraps(fn)
    async def run(call: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = _tracer
        if tracer is None:
            return await fn(call, *args, **kwargs)
        operation = _operation(call.ctx.endpoint)
        span = tracer.start_span(
            f"{operation} {call.ctx.requested_model}",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": call.ctx.requested_model,
                "infrai.stream": call.stream,
            },
        )
        call.request.state[VENDOR_SPAN] = (span, None)
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=True):
                result = await fn(call, *args, **kwargs)
        except BaseException:
            span.set_status(Status(StatusCode.ERROR))
            call.request.state[VENDOR_SPAN] = (span, time.time_ns())
            raise
        if not call.stream:
            call.request.state[VENDOR_SPAN] = (span, time.time_ns())
            if isinstance(result, dict):
                reasons = [
                    str(c.get("finish_reason"))
                    for c in result.get("choices") or []
                    if isinstance(c, dict) and c.get("finish_reason")
                ]
                if reasons:
                    call.request.state[FINISH_REASONS] = reasons
        return result

    return cast(F, run)


def vendor_attempt_failed(vendor: str, kind: str) -> None:
    """An event on the current (vendor) span for a failed attempt before a failover."""
    if _tracer is not None:
        trace.get_current_span().add_event(
            "infrai.vendor_failed", {"infrai.vendor": vendor, "error.type": kind}
        )


def stream_reasons(state: dict[str, Any], reasons: Iterable[str]) -> None:
    """Remember a stream's finish reasons for its vendor span."""
    if _tracer is not None:
        state[FINISH_REASONS] = [str(r) for r in reasons]


def call_finished(state: dict[str, Any], attributes: dict[str, Any], error: bool) -> None:
    """Set the call's outcome on the root span and end its vendor span with the usage."""
    if _tracer is None:
        return
    current = trace.get_current_span()
    root_attributes = {
        k: v for k, v in attributes.items() if k.startswith("infrai.") and v not in ("", None)
    }
    current.set_attributes(root_attributes)
    pending = state.pop(VENDOR_SPAN, None)
    if pending is None:
        return
    span, ended_ns = pending
    span.set_attributes({k: v for k, v in attributes.items() if k.startswith("gen_ai.")})
    reasons = state.pop(FINISH_REASONS, None)
    if reasons:
        span.set_attribute("gen_ai.response.finish_reasons", reasons)
    if error:
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=ended_ns)


class Root:
    """The server span of one ``/v1`` request (see :func:`infra.observability.observe_v1`)."""

    __slots__ = ("span",)

    def __init__(self, scope: dict[str, Any]) -> None:
        assert _tracer is not None
        method, path = scope["method"], scope["path"]
        self.span = _tracer.start_span(
            f"{method} {path}",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        )

    def activate(self) -> Any:
        return trace.use_span(self.span, end_on_exit=False, record_exception=True)

    def end(self, *, status: int, route: str, request_id: str) -> None:
        self.span.update_name(f"{self.span.name.split(' ')[0]} {route}")  # type: ignore[attr-defined]
        self.span.set_attributes(
            {
                "http.response.status_code": status,
                "http.route": route,
                "infrai.request_id": request_id,
            }
        )
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()


def new_root(scope: dict[str, Any]) -> Root | None:
    """A server span for the request, or None when tracing is off."""
    return Root(scope) if _tracer is not None else None
