"""A client that leaves a Responses or Messages stream at any point (before the first event,
after a few, just before the end) is billed once for what was delivered, the vendor's request
is cancelled, no hold stays open and the audit is clean — the dialects share chat's relay."""

from __future__ import annotations

import httpx
import pytest

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from inference.models import RequestLog, RequestStatus
from tests.live import wait_for

WORDS = " ".join(f"w{i}" for i in range(40))
BODIES = {
    "/responses": {"model": "test-large", "input": WORDS, "stream": True},
    "/messages": {
        "model": "test-large",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": WORDS}],
        "stream": True,
    },
}


@pytest.mark.parametrize("path", sorted(BODIES))
@pytest.mark.parametrize("events_read", [0, 3, 30])
def test_leaving_a_dialect_stream_bills_what_was_delivered_once(
    api_base, issue_key, fake_catalog, path, events_read
):
    vendor = fake_catalog["primary"]
    vendor.chunk_delay_s = 0.05
    headers = {"authorization": f"Bearer {issue_key()}"}
    with httpx.stream(
        "POST", api_base + path, json=BODIES[path], headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        request_id = response.headers["x-infrai-request-id"]
        read = 0
        for line in response.iter_lines():
            if read >= events_read:
                break
            if line.startswith("data: "):
                read += 1
    row = wait_for(lambda: RequestLog.objects.filter(request_id=request_id).first())
    assert row.status in (RequestStatus.CANCELLED, RequestStatus.OK)
    wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists())
    entries = LedgerEntry.objects.filter(request_id=request_id, kind=EntryKind.USAGE)
    assert entries.count() <= 1
    assert sum(-e.amount_nanos for e in entries) == row.cost_nanos
    if row.status == RequestStatus.CANCELLED:
        assert row.error_code == "client_disconnected" or row.http_status == 499
    assert audit_findings().findings == []


def test_the_deepest_and_largest_messages_bodies_are_refused_before_any_work(
    api_base, issue_key, fake_catalog, settings
):
    headers = {"x-api-key": issue_key(), "content-type": "application/json"}
    deep = b'{"model":"test-large","max_tokens":5,"metadata":' + b"[" * 200 + b"]" * 200 + b"}"
    refused = httpx.post(api_base + "/messages", content=deep, headers=headers, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "invalid_request_error"
    big = b'{"model":"test-large","max_tokens":5,"messages":[{"role":"user","content":"'
    big += b"x" * (int(settings.INFRAI_MAX_BODY_BYTES) + 1) + b'"}]}'
    too_large = httpx.post(api_base + "/messages", content=big, headers=headers, timeout=30)
    assert too_large.status_code == 413
    assert too_large.json()["error"]["type"] == "request_too_large"
    assert not Hold.objects.exists() and not fake_catalog["primary"].requests
