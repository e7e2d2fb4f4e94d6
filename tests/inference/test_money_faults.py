"""Money on every exit path: vendor faults, client faults, and the request path's own.

Each case drives the live app with a fake vendor misbehaving (``FakeVendor.fault``) or a client
leaving at some point, then asserts one thing: the call was settled exactly once for what was
delivered (or not charged, with no hold left open), its request-log row exists, and the money
audit is clean.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import openai
import pytest

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from inference import settlement, stages, tokens
from inference.call import Call
from inference.chat.leg import routing_request
from inference.chat.validation import parse_chat_request
from inference.models import RequestLog, RequestStatus
from infra import background
from money.pricing import Usage
from tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "test-large", "messages": [{"role": "user", "content": "alpha beta gamma delta"}]}


def assert_settled_once(request_id: str) -> RequestLog:
    """The call has its log row, at most one usage entry equal to its cost, no open hold."""
    log = RequestLog.objects.get(request_id=request_id)
    entries = list(LedgerEntry.objects.filter(request_id=request_id, kind=EntryKind.USAGE))
    assert log.cost_nanos >= 0
    assert [e.amount_nanos for e in entries] == ([-log.cost_nanos] if log.cost_nanos else [])
    assert Hold.objects.get(request_id=request_id).status != HoldStatus.OPEN
    return log


def assert_books_clean() -> None:
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []


def _done() -> bool:
    return not Hold.objects.filter(status=HoldStatus.OPEN).exists()


# --- vendor usage that cannot be true ---------------------------------------------------------
@pytest.mark.parametrize(
    "fault", ["usage_negative", "usage_garbage", "usage_cached_over", "usage_huge"]
)
@pytest.mark.parametrize("stream", [False, True])
def test_untrue_vendor_usage_is_replaced_by_our_estimate(
    fault, stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = fault
    client = client_for(issue_key())
    if stream:
        chunks = list(client.chat.completions.create(**CHAT, stream=True))
        infrai = next(c.infrai for c in chunks if getattr(c, "infrai", None))
    else:
        infrai = client.chat.completions.create(**CHAT).infrai
    assert infrai["cost_nanos"] > 0 and infrai["usage_estimated"] is True
    log = assert_settled_once(infrai["request_id"])
    assert (log.status, log.error_code) == (RequestStatus.OK, "vendor_usage_invalid")
    assert log.output_tokens == tokens.count_text("Echo: alpha beta gamma delta")  # our count
    assert_books_clean()


# --- vendor streams that break or lie ---------------------------------------------------------
@pytest.mark.parametrize("fault", ["error_string_chunk", "array_chunk", "not_json_chunk"])
def test_a_malformed_chunk_ends_the_stream_with_an_error_and_bills_what_was_delivered(
    fault, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = fault
    client = client_for(issue_key(), timeout=30)
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client.chat.completions.create(**CHAT, stream=True):
            received.append(chunk)
    assert "billed for what was delivered" in info.value.message
    infrai = info.value.body["infrai"]
    delivered = "".join(c.choices[0].delta.content or "" for c in received)
    assert delivered == "Echo: alpha"
    log = assert_settled_once(infrai["request_id"])
    assert (log.status, log.error_code) == (RequestStatus.VENDOR_ERROR, "vendor_stream_interrupted")
    assert log.cost_nanos > 0
    assert_books_clean()


def test_a_complete_stream_without_done_is_billed_on_its_usage(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fault = "no_done"
    client = client_for(issue_key())
    chunks = list(client.chat.completions.create(**CHAT, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: alpha beta gamma delta"
    infrai = chunks[-1].infrai
    assert "usage_estimated" not in infrai
    log = assert_settled_once(infrai["request_id"])
    assert (log.status, log.input_tokens, log.output_tokens) == (RequestStatus.OK, 4, 5)
    assert_books_clean()


def test_a_vendor_that_hangs_mid_stream_is_cut_at_the_read_timeout(
    issue_key, client_for, fake_catalog, settings
):
    settings.INFRAI_VENDOR_READ_TIMEOUT_S = 0.5
    fake_catalog["primary"].fault = "hang"
    fake_catalog["primary"].hang_s = 5.0
    client = client_for(issue_key(), timeout=30)
    with pytest.raises(openai.APIError) as info:
        list(client.chat.completions.create(**CHAT, stream=True))
    log = assert_settled_once(info.value.body["infrai"]["request_id"])
    assert log.error_code == "vendor_stream_interrupted" and log.cost_nanos > 0
    assert_books_clean()


def test_a_stream_past_the_maximum_duration_ends_billed(
    issue_key, client_for, fake_catalog, settings
):
    settings.INFRAI_MAX_STREAM_S = 0.0  # every stream is over the limit after its first chunk
    client = client_for(issue_key(), timeout=30)
    with pytest.raises(openai.APIError) as info:
        list(client.chat.completions.create(**CHAT, stream=True))
    assert info.value.body["code"] == "stream_too_long"
    log = assert_settled_once(info.value.body["infrai"]["request_id"])
    assert log.error_code == "stream_too_long"
    assert_books_clean()


# --- the request path's own failures -----------------------------------------------------------
def _post_raw(api_base: str, key: str, body: dict) -> httpx.Response:  # type: ignore[type-arg]
    return httpx.post(
        api_base + "/chat/completions",
        content=json.dumps(body).encode(),  # \u0000 and \ud800 stay JSON escapes
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        timeout=30,
    )


def test_text_the_database_refuses_never_makes_a_call_free(issue_key, api_base, fake_catalog):
    r = _post_raw(api_base, issue_key(), {**CHAT, "task": "nul\x00inside"})
    assert r.status_code == 200, r.text
    log = assert_settled_once(r.json()["infrai"]["request_id"])
    assert log.cost_nanos > 0
    assert_books_clean()


def test_a_lone_surrogate_is_refused_before_any_work(issue_key, api_base, fake_catalog):
    r = _post_raw(api_base, issue_key(), {**CHAT, "task": "lone \ud800 surrogate"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert not Hold.objects.exists() and not fake_catalog["primary"].requests


# --- clients that leave -----------------------------------------------------------------------
@pytest.mark.parametrize("after_lines", [0, 1, 2, 3, 4, 5, 6])
def test_a_client_leaving_after_any_chunk_is_billed_exactly_once(
    after_lines, issue_key, api_base, fake_catalog
):
    """0: right after the headers; 5: after the last content chunk; 6: after the final one."""
    fake_catalog["primary"].chunk_delay_s = 0.05
    with httpx.stream(
        "POST",
        api_base + "/chat/completions",
        json={**CHAT, "stream": True},
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=30,
    ) as r:
        request_id = r.headers["x-infrai-request-id"]
        seen = 0
        for line in r.iter_lines():
            if seen >= after_lines:
                break
            if line.startswith("data: "):
                seen += 1
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id).exists() and _done())
    assert_settled_once(request_id)
    assert_books_clean()


def test_a_client_leaving_a_non_streamed_call_is_not_charged(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].stall_s = 1.0
    fake_catalog["backup"].stall_s = 1.0
    client = client_for(issue_key(), timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(**CHAT)
    wait_for(lambda: RequestLog.objects.exists() and _done())
    log = RequestLog.objects.get()
    assert (log.status, log.http_status, log.cost_nanos) == (RequestStatus.CANCELLED, 499, 0)
    assert not LedgerEntry.objects.filter(request_id=log.request_id).exists()
    assert_books_clean()


@pytest.mark.parametrize("pause_s", [0.0, 0.005, 0.02, 0.05])
def test_a_client_aborting_around_the_hold_leaves_nothing_open(
    pause_s, issue_key, api_base, fake_catalog
):
    key = issue_key()
    host, port = api_base.removeprefix("http://").split("/")[0].split(":")
    body = json.dumps({**CHAT, "stream": True}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + body)
        time.sleep(pause_s)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.2)
    wait_for(_done)
    for hold in Hold.objects.all():
        assert_settled_once(hold.request_id)
    assert_books_clean()


# --- the hold itself, driven directly ----------------------------------------------------------
def _call(key: str) -> Call:
    from accounts.auth import authenticate
    from inference.http import ApiRequest, new_request_id

    async def build() -> Call:
        ctx = await authenticate(f"Bearer {key}")
        request = ApiRequest(
            method="POST",
            path="/v1/chat/completions",
            headers={},
            body=b"",
            query={},
            request_id=new_request_id(),
            started_ns=time.perf_counter_ns(),
            key=ctx,
        )
        return Call.open(request, endpoint="chat.completions", requested_model="m")

    return asyncio.run(build())


def test_a_cancellation_while_the_hold_opens_releases_it(issue_key, fake_catalog):
    call = _call(issue_key())
    chat = parse_chat_request(dict(CHAT))

    async def scenario() -> None:
        await stages.route(call, routing_request(chat))
        task = asyncio.ensure_future(
            stages.hold(call, lambda _c: Usage(input_tokens=100, output_tokens=100))
        )
        await asyncio.sleep(0)  # the opening has started in its own task
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while kept := background.pending(asyncio.get_running_loop()):
            await asyncio.wait(kept)

    asyncio.run(scenario())
    rid = call.request.request_id
    hold = Hold.objects.get(request_id=rid)
    assert (hold.status, hold.captured_nanos) == (HoldStatus.SETTLED, 0)
    log = RequestLog.objects.get(request_id=rid)
    assert (log.status, log.http_status) == (RequestStatus.CANCELLED, 499)
    assert_books_clean()


def test_a_relaying_process_renews_its_holds(issue_key, fake_catalog, settings):
    settings.INFRAI_HOLD_TTL_S = 60
    call = _call(issue_key())
    chat = parse_chat_request(dict(CHAT))

    async def scenario() -> int:
        await stages.route(call, routing_request(chat))
        await stages.hold(call, lambda _c: Usage(input_tokens=10, output_tokens=10))
        before = await _expires(call.request.request_id)
        renewed = await settlement.renew_due(call.floor, now=time.monotonic() + 21)
        after = await _expires(call.request.request_id)
        assert after > before
        call.charge(Usage(input_tokens=10, output_tokens=1))
        await settlement.finish(call, status=RequestStatus.OK, http_status=200)
        return renewed

    assert asyncio.run(scenario()) == 1
    assert_settled_once(call.request.request_id)
    assert_books_clean()


async def _expires(request_id: str):  # type: ignore[no-untyped-def]
    from infra.db import db_async

    return await db_async(lambda: Hold.objects.get(request_id=request_id).expires_at)()


def test_holds_are_sized_by_the_model_and_a_402_says_what_would_fit(
    issue_key, client_for, fake_catalog
):
    # $0.000100 affords test-large's prompt plus ~45 output tokens, far below 4096 but enough
    # for the 5-token answer: the call passes with an explicit small max_tokens...
    client = client_for(issue_key(credit_usd="0.0001"))
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(**CHAT)
    assert info.value.status_code == 402
    message = info.value.body["message"]
    fit = int(message.split("A max_tokens of at most ")[1].split(" ")[0])
    assert fit >= 5
    resp = client.chat.completions.create(**CHAT, max_tokens=fit)
    assert resp.choices[0].message.content == "Echo: alpha beta gamma delta"
    assert_settled_once(resp.infrai["request_id"])
    assert_books_clean()


def test_a_model_still_loading_is_a_503_with_retry_after_and_no_circuit_failure(
    issue_key, client_for, fake_catalog
):
    for vendor in ("primary", "backup"):
        fake_catalog[vendor].fail_statuses = [503] * 10
        fake_catalog[vendor].fail_code = "model_loading"
    client = client_for(issue_key())
    for _ in range(6):  # more than the circuit's failure threshold
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(**CHAT)
        assert info.value.status_code == 503 and info.value.body["code"] == "model_loading"
        assert info.value.response.headers["retry-after"] == "7"
    for vendor in ("primary", "backup"):
        fake_catalog[vendor].fail_statuses = []
    # An open circuit (5 failures) would refuse this call: loading never tripped it.
    assert client.chat.completions.create(**CHAT).choices[0].message.content
    assert_books_clean()


# --- the largest and deepest input the limits allow ---------------------------------------------
def test_the_largest_and_deepest_body_the_limits_allow_is_served_or_refused_cleanly(
    issue_key, api_base, fake_catalog, settings
):
    key = issue_key(credit_usd="50")
    limit = int(settings.INFRAI_MAX_BODY_BYTES)
    schema: dict = {"type": "string"}
    for _ in range(60):  # just under the 64-level depth limit
        schema = {"type": "object", "properties": {"x": schema}}
    body = {
        "model": "test-large",
        "messages": [{"role": "user", "content": ""}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    }
    room = limit - len(json.dumps(body)) - 64
    body["messages"][0]["content"] = "word " * (room // 5)
    raw = json.dumps(body).encode()
    assert len(raw) <= limit
    r = httpx.post(
        api_base + "/chat/completions",
        content=raw,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        timeout=120,
    )
    assert r.status_code in (200, 400), r.text  # never a 5xx
    if r.status_code == 200:
        assert_settled_once(r.json()["infrai"]["request_id"])
    else:
        assert "error" in r.json() and not Hold.objects.exists()
    assert_books_clean()
