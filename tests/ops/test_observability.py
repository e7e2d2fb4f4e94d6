"""Metrics, traces and call logs of the live app (uvicorn in this process, fake vendors).

- ``/metrics`` after a handful of calls: every counter moved by exactly those calls (the
  request-log rows are the truth they are compared with);
- the span tree of a call with the in-memory exporter: root, auth, route, hold, the vendor call
  with its GenAI attributes (and the failed attempt before the failover), settlement;
- one log line per call, without the key or the prompt;
- ``/metrics`` answers only its token; ``/readyz`` says what is missing.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from accounts.keys import hash_key
from accounts.models import ApiKey
from accounts.services import api_key_cache_forget
from catalog.models import Vendor
from inference import rollups
from inference.models import RequestLog, UsagePending
from infra.observability import tracing
from infra.observability.logs import JsonFormatter
from tests.live import wait_for
from tests.ops.conftest import Samples, moved, parse_metrics, total

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "scrape-token-for-tests"
PROMPT = "the zebra crossing at midnight"
HI = [{"role": "user", "content": PROMPT}]


def scrape(live_url: str) -> Samples:
    r = httpx.get(live_url + "/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    return parse_metrics(r.text)


@pytest.fixture
def metrics_token(settings: Any) -> str:
    settings.INFRAI_METRICS_TOKEN = TOKEN
    return TOKEN


def _limit_rpm(raw_key: str, rpm: int) -> None:
    ApiKey.objects.filter(key_hash=hash_key(raw_key)).update(requests_per_minute=rpm)
    api_key_cache_forget(key_hash=hash_key(raw_key))


def test_metrics_moved_by_exactly_the_calls_made(
    fake_catalog: Any, issue_key: Callable[..., str], live_url: str, metrics_token: str
) -> None:
    key, poor, limited = issue_key(), issue_key(org="poor", credit_usd="0"), issue_key(org="lim")
    _limit_rpm(limited, 1)
    before = scrape(live_url)

    client = openai.OpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0)
    client.chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    list(client.chat.completions.create(model="test-large", messages=HI, stream=True))
    fake_catalog["primary"].fail_statuses = [500]  # one failure, then the backup serves
    client.chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    with pytest.raises(openai.APIStatusError) as refused:
        openai.OpenAI(
            base_url=live_url + "/v1", api_key=poor, max_retries=0
        ).chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    assert refused.value.status_code == 402
    rate_limited = openai.OpenAI(base_url=live_url + "/v1", api_key=limited, max_retries=0)
    rate_limited.chat.completions.create(model="test-small", messages=HI, max_tokens=5)
    with pytest.raises(openai.RateLimitError):
        rate_limited.chat.completions.create(model="test-small", messages=HI, max_tokens=5)

    rows = wait_for(lambda: (r := list(RequestLog.objects.all())) and len(r) == 6 and r)
    after = scrape(live_url)

    outcomes = Counter((r.endpoint, r.model, r.vendor, r.status, str(r.http_status)) for r in rows)
    assert sum(outcomes.values()) == 6
    for (endpoint, model, vendor, status, http_status), n in outcomes.items():
        labels = dict(endpoint=endpoint, model=model, vendor=vendor, status=status)
        assert moved(before, after, "infrai_calls_total", **labels, http_status=http_status) == n
    assert total(after, "infrai_calls_total") - total(before, "infrai_calls_total") == 6
    served = {(r.model, r.vendor) for r in rows if r.vendor}
    assert served == {
        ("test-large", "primary"),
        ("test-large", "backup"),
        ("test-small", "primary"),
    }
    for model, vendor in served:
        mine = [r for r in rows if (r.model, r.vendor) == (model, vendor)]
        for direction, field in (("input", "input_tokens"), ("output", "output_tokens")):
            expected = sum(getattr(r, field) for r in mine)
            assert expected > 0
            got = moved(
                before,
                after,
                "infrai_tokens_total",
                model=model,
                vendor=vendor,
                direction=direction,
            )
            assert got == expected
        cost = moved(before, after, "infrai_cost_nanos_total", model=model, vendor=vendor)
        assert cost == sum(r.cost_nanos for r in mine) > 0
    chat = dict(endpoint="/v1/chat/completions", method="POST")
    assert moved(before, after, "infrai_http_requests_total", **chat, status="200") == 4
    assert moved(before, after, "infrai_http_requests_total", **chat, status="402") == 1
    assert moved(before, after, "infrai_http_requests_total", **chat, status="429") == 1
    assert (
        moved(before, after, "infrai_http_request_duration_seconds_count", **chat, status="200")
        == 4
    )
    assert (
        moved(before, after, "infrai_rate_limit_refusals_total", endpoint="chat.completions") == 1
    )
    errors = total(after, "infrai_vendor_errors_total", vendor="primary") - total(
        before, "infrai_vendor_errors_total", vendor="primary"
    )
    assert errors == 1
    assert moved(before, after, "infrai_failovers_total", model="test-large") == 1
    streamed = [r for r in rows if r.ttft_ms is not None]
    ttft = total(after, "infrai_time_to_first_token_seconds_count") - total(
        before, "infrai_time_to_first_token_seconds_count"
    )
    assert ttft == len(streamed) >= 1
    # Read at scrape time: no hold is open now, and every vendor's circuit is reported.
    assert after[("infrai_open_holds", frozenset())] == 0
    # No beat here: the calls' usage waits in the rollups' queue, one row a log row.
    queued = UsagePending.objects.count()
    assert queued >= len(rows)
    assert after[("infrai_usage_queue_rows", frozenset())] == queued
    rollups.drain()
    assert scrape(live_url)[("infrai_usage_queue_rows", frozenset())] == 0
    assert (
        after[("infrai_circuit_state", frozenset({("vendor", "primary"), ("state", "closed")}))]
        == 1
    )


def test_each_dialect_is_counted_under_its_own_endpoint(
    fake_catalog: Any, issue_key: Callable[..., str], live_url: str, metrics_token: str
) -> None:
    """Responses, Anthropic Messages (and count_tokens) and the Batch API move the same
    counters as chat, each under its own ``endpoint`` label, exactly as the request log has
    them."""
    import anthropic

    key = issue_key()
    before = scrape(live_url)
    client = openai.OpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0)
    client.responses.create(model="test-large", input=PROMPT, store=False)
    claude = anthropic.Anthropic(base_url=live_url, api_key=key, max_retries=0)
    claude.messages.create(model="test-large", max_tokens=20, messages=HI)
    with claude.messages.stream(model="test-large", max_tokens=20, messages=HI) as stream:
        stream.get_final_message()
    claude.messages.count_tokens(model="test-large", messages=HI)
    client.batches.list()

    rows = wait_for(lambda: (r := list(RequestLog.objects.all())) and len(r) == 5 and r)
    after = scrape(live_url)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    by_endpoint = Counter(r.endpoint for r in rows)
    assert by_endpoint["responses"] == 1 and by_endpoint["messages"] == 2
    assert len(by_endpoint) == 4  # count_tokens and the batch list: their own labels
    for endpoint, n in by_endpoint.items():
        assert grew("infrai_calls_total", endpoint=endpoint) == n, endpoint
    for path, n in (("/v1/responses", 1), ("/v1/messages", 2), ("/v1/batches", 1)):
        assert grew("infrai_http_requests_total", endpoint=path, status="200") == n, path
    for direction, field in (("input", "input_tokens"), ("output", "output_tokens")):
        assert grew("infrai_tokens_total", direction=direction) == sum(
            getattr(r, field) for r in rows
        )
    assert grew("infrai_cost_nanos_total") == sum(r.cost_nanos for r in rows) > 0


def test_metrics_answer_only_their_token(live_url: str, settings: Any, db: None) -> None:
    settings.INFRAI_METRICS_TOKEN = ""
    assert httpx.get(live_url + "/metrics").status_code == 404
    settings.INFRAI_METRICS_TOKEN = TOKEN
    assert httpx.get(live_url + "/metrics").status_code == 401
    wrong = {"authorization": "Bearer nope"}
    assert httpx.get(live_url + "/metrics", headers=wrong).status_code == 401
    right = {"authorization": f"Bearer {TOKEN}"}
    r = httpx.get(live_url + "/metrics", headers=right)
    assert r.status_code == 200
    assert "infrai_http_requests_total" in r.text or "infrai_open_holds" in r.text


def test_readyz_names_what_is_missing(fake_catalog: Any, live_url: str) -> None:
    assert httpx.get(live_url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(live_url + "/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": "ok", "models": "ok"},
    }
    Vendor.objects.update(enabled=False)
    not_ready = httpx.get(live_url + "/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"]["models"] == "no routable model"


def test_one_log_line_per_call_without_key_or_prompt(
    fake_catalog: Any,
    issue_key: Callable[..., str],
    live_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = issue_key()
    client = openai.OpenAI(base_url=live_url + "/v1", api_key=key, max_retries=0)
    with caplog.at_level(logging.INFO, logger="infrai.calls"):
        raw = client.chat.completions.with_raw_response.create(
            model="test-large", messages=HI, max_tokens=20
        )
        request_id = raw.headers["x-request-id"]
        records = wait_for(
            lambda: [
                r for r in caplog.records if getattr(r, "call", {}).get("request_id") == request_id
            ]
        )
    assert len(records) == 1
    line = JsonFormatter().format(records[0])
    assert key not in line and key[8:] not in line and PROMPT not in line
    assert "zebra" not in records[0].getMessage()
    data = json.loads(line)
    row = RequestLog.objects.get(request_id=request_id)
    assert data["event"] == "call"
    assert data["key_prefix"] == key[:8]
    expected = {
        "request_id": request_id,
        "organization_id": row.organization_id,
        "model": "test-large",
        "vendor": "primary",
        "status": "ok",
        "http_status": 200,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_nanos": row.cost_nanos,
        "latency_ms": row.latency_ms,
    }
    assert {k: data[k] for k in expected} == expected


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider, libraries=False)
    try:
        yield exporter
    finally:
        tracing.uninstall()


def _tree(
    exporter: InMemorySpanExporter, request_id: str
) -> tuple[ReadableSpan, list[ReadableSpan]]:
    def find() -> ReadableSpan | None:
        for span in exporter.get_finished_spans():
            if (
                span.kind is SpanKind.SERVER
                and (span.attributes or {}).get("infrai.request_id") == request_id
            ):
                return span
        return None

    root = wait_for(find)
    children = [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == root.context.span_id
    ]
    return root, children


def test_a_call_is_one_span_tree_with_genai_attributes(
    fake_catalog: Any, issue_key: Callable[..., str], live_url: str, spans: InMemorySpanExporter
) -> None:
    client = openai.OpenAI(base_url=live_url + "/v1", api_key=issue_key(), max_retries=0)
    fake_catalog["primary"].fail_statuses = [503]
    raw = client.chat.completions.with_raw_response.create(
        model="test-large", messages=HI, max_tokens=20
    )
    request_id = raw.headers["x-request-id"]
    root, children = _tree(spans, request_id)
    row = RequestLog.objects.get(request_id=request_id)

    assert root.name == "POST /v1/chat/completions"
    assert root.attributes is not None
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["infrai.organization_id"] == row.organization_id
    by_name = {s.name: s for s in children}
    assert set(by_name) == {
        "infrai.auth",
        "infrai.route",
        "infrai.hold",
        "chat test-large",
        "infrai.settle",
    }
    order = [by_name[n].start_time for n in ("infrai.auth", "infrai.route", "infrai.hold")]
    assert order == sorted(order)
    vendor = by_name["chat test-large"]
    assert vendor.kind is SpanKind.CLIENT
    assert vendor.attributes is not None
    assert vendor.attributes["gen_ai.operation.name"] == "chat"
    assert vendor.attributes["gen_ai.request.model"] == "test-large"
    assert vendor.attributes["gen_ai.provider.name"] == "backup"
    assert vendor.attributes["gen_ai.usage.input_tokens"] == row.input_tokens > 0
    assert vendor.attributes["gen_ai.usage.output_tokens"] == row.output_tokens > 0
    assert tuple(vendor.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    failed = [e for e in vendor.events if e.name == "infrai.vendor_failed"]
    assert [(e.attributes or {}).get("infrai.vendor") for e in failed] == ["primary"]
    assert vendor.end_time is not None and by_name["infrai.settle"].start_time >= vendor.end_time


def test_a_stream_has_its_vendor_span_until_its_end(
    fake_catalog: Any, issue_key: Callable[..., str], live_url: str, spans: InMemorySpanExporter
) -> None:
    client = openai.OpenAI(base_url=live_url + "/v1", api_key=issue_key(), max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="test-large", messages=HI, stream=True
    ) as response:
        request_id = response.headers["x-request-id"]
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    root, children = _tree(spans, request_id)
    vendor = next(s for s in children if s.kind is SpanKind.CLIENT)
    row = RequestLog.objects.get(request_id=request_id)
    assert vendor.attributes is not None
    assert vendor.attributes["infrai.stream"] is True
    assert tuple(vendor.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    assert vendor.attributes["gen_ai.usage.output_tokens"] == row.output_tokens > 0
    settle = next(s for s in children if s.name == "infrai.settle")
    # It lasts until the stream's end: past the first token, up to the settlement.
    assert row.ttft_ms is not None and vendor.end_time is not None
    assert root.start_time is not None and settle.start_time is not None
    assert root.start_time + row.ttft_ms * 1_000_000 <= vendor.end_time <= settle.start_time


def test_nothing_is_recorded_while_tracing_is_off(
    fake_catalog: Any, issue_key: Callable[..., str], live_url: str
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert not tracing.enabled()
    client = openai.OpenAI(base_url=live_url + "/v1", api_key=issue_key(), max_retries=0)
    client.chat.completions.create(model="test-large", messages=HI, max_tokens=20)
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("path", "status", "label"),
    [
        ("/v1/chat/completions", 200, "/v1/chat/completions"),
        ("/v1/models/gpt-4o-mini", 200, "/v1/models/{id}"),
        ("/v1/responses/resp_0123abcd", 200, "/v1/responses/{id}"),
        ("/v1/audio/speech", 402, "/v1/audio/speech"),
        ("/v1/anything/an_attacker/chose", 404, "other"),
        ("/v1/chat/completions", 405, "other"),
    ],
)
def test_endpoint_labels_stay_bounded(path: str, status: int, label: str) -> None:
    from infra.observability.metrics import endpoint_label

    assert endpoint_label(path, status) == label
