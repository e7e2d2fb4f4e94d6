"""With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a real web process exports its spans over OTLP/HTTP
— ours, and those of the Django, aiohttp (vendor calls) and psycopg instrumentations — to a
collector (here an HTTP server on 127.0.0.1 that decodes what it receives)."""

from __future__ import annotations

import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.live import server_process

pytestmark = [
    pytest.mark.django_db(transaction=True),
]


class Collector(ThreadingHTTPServer):
    """Receives OTLP/HTTP protobuf exports; keeps every span as (name, kind, attributes)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, dict[str, Any]]] = []
        self.paths: set[str] = set()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                collector.paths.add(self.path)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attributes = {a.key: a.value for a in span.attributes}
                            collector.spans.append((span.name, span.kind, attributes))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_configured_process_exports_its_spans_over_otlp(
    fake_catalog: Any, issue_key: Any
) -> None:
    collector = Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    proc, url = server_process(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_address[1]}",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=issue_key(), max_retries=0)
        client.chat.completions.create(
            model="test-large", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        )
        assert httpx.get(url + "/readyz").status_code == 200  # a Django view
        deadline = time.monotonic() + 30
        wanted = {"chat test-large", "infrai.settle", "GET readyz"}
        while not wanted <= {name for name, _, _ in collector.spans}:
            assert time.monotonic() < deadline, sorted({n for n, _, _ in collector.spans})
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        collector.shutdown()
    assert collector.paths == {"/v1/traces"}
    names = {name for name, _, _ in collector.spans}
    assert {"POST /v1/chat/completions", "infrai.auth", "infrai.route", "infrai.hold"} <= names
    vendor = next(a for n, _, a in collector.spans if n == "chat test-large")
    assert vendor["gen_ai.request.model"].string_value == "test-large"
    assert vendor["gen_ai.usage.output_tokens"].int_value > 0
    # The libraries' own spans: the vendor request (aiohttp) and SQL statements (psycopg).
    assert any(
        a.get("http.request.method") or a.get("http.method")
        for n, _, a in collector.spans
        if n.startswith("POST") and n != "POST /v1/chat/completions"
    )
    assert any(a.get("db.system") or a.get("db.system.name") for _, _, a in collector.spans)
