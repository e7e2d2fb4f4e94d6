"""Failover, broken streams, disconnects, the response cache, rate limits, 402, Anthropic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import pytest

from accounts.models import ApiKey
from billing.models import Hold, HoldStatus, LedgerEntry
from inference import tokens
from inference.models import RequestLog, RequestStatus
from tests.fakes.vendors import FakeVendor
from tests.live import wait_for

pytestmark = pytest.mark.usefixtures("fake_catalog")
MESSAGES = [{"role": "user", "content": "hello"}]


def test_failover_before_first_byte(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fail_statuses = [503]
    raw = client_for(issue_key()).chat.completions.with_raw_response.create(
        model="test-large", messages=MESSAGES
    )
    resp = raw.parse()
    assert resp.choices[0].message.content == "Echo: hello"
    assert resp.infrai["vendor"] == "backup" and resp.infrai["failovers"] == 1
    assert raw.headers["x-infrai-vendor"] == "backup"
    assert RequestLog.objects.get(request_id=resp.infrai["request_id"]).failovers == 1


def test_streamed_failover_before_first_byte(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fail_statuses = [429]
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="test-large", messages=MESSAGES, stream=True
        )
    )
    assert chunks[-1].infrai["vendor"] == "backup"


def test_all_vendors_failing_is_502_and_charges_nothing(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fail_statuses = [500]
    fake_catalog["backup"].fail_statuses = [502]
    with pytest.raises(openai.InternalServerError) as info:
        client_for(issue_key()).chat.completions.create(model="test-large", messages=MESSAGES)
    assert info.value.status_code == 502
    assert not LedgerEntry.objects.filter(kind="usage").exists()
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert RequestLog.objects.get().status == RequestStatus.VENDOR_ERROR


def test_stall_times_out_and_fails_over(issue_key, client_for, fake_catalog, settings):
    settings.INFRAI_VENDOR_READ_TIMEOUT_S = 0.5
    fake_catalog["primary"].stall_s = 3
    resp = client_for(issue_key()).chat.completions.create(model="test-large", messages=MESSAGES)
    assert resp.infrai["vendor"] == "backup"


def test_failure_after_first_byte_ends_with_an_error_and_bills_what_was_delivered(
    issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].cut_after = 3  # role chunk + two words, then the connection drops
    client = client_for(issue_key())
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client.chat.completions.create(
            model="test-large",
            messages=[{"role": "user", "content": "alpha beta gamma delta"}],
            stream=True,
        ):
            received.append(chunk)
    assert "billed for what was delivered" in str(info.value)
    delivered = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
    assert delivered == "Echo: alpha"
    assert all(c.choices for c in received)  # no empty-choices chunk without include_usage
    infrai = info.value.body["infrai"]  # the error event carries the call's infrai object
    assert infrai["usage_estimated"] is True
    log = RequestLog.objects.get(request_id=infrai["request_id"])
    assert log.output_tokens == tokens.count_text(delivered)
    assert log.error_code == "vendor_stream_interrupted"
    assert LedgerEntry.objects.get(request_id=log.request_id).amount_nanos == -log.cost_nanos
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


@contextmanager
def _slow_stream(api_base: str, key: str, vendor: FakeVendor) -> Iterator[httpx.Response]:
    """A streamed chat of 40 words that ``vendor`` relays one every 0.2 s, on the raw HTTP API."""
    vendor.chunk_delay_s = 0.2
    words = " ".join(f"w{i}" for i in range(40))
    body = {"model": "test-large", "messages": [{"role": "user", "content": words}], "stream": True}
    with httpx.stream(
        "POST",
        api_base + "/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        yield response


def test_client_disconnect_cancels_upstream_and_bills_delivered_tokens(
    api_base, issue_key, fake_catalog
):
    delivered = []
    with _slow_stream(api_base, issue_key(), fake_catalog["primary"]) as r:
        request_id = r.headers["x-infrai-request-id"]
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunk = json.loads(line[6:])
                delivered.append(chunk["choices"][0]["delta"].get("content") or "")
                if len(delivered) == 4:
                    break
    # the upstream stream was cancelled long before its 40 words
    assert fake_catalog["primary"].stream_closed.wait(10)
    assert fake_catalog["primary"].chunks_sent < 20
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id).exists())
    log = RequestLog.objects.get(request_id=request_id)
    assert log.status == RequestStatus.CANCELLED
    # every chunk the server handed over was counted; the client may not have read the last one
    assert (
        tokens.count_text("".join(delivered))
        <= log.output_tokens
        <= tokens.count_text("".join(delivered) + " w3 w4")
    )
    assert LedgerEntry.objects.get(request_id=request_id).amount_nanos == -log.cost_nanos
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_deterministic_calls_are_answered_from_the_cache_for_free(
    issue_key, client_for, fake_catalog
):
    client = client_for(issue_key())
    first = client.chat.completions.create(model="test-large", messages=MESSAGES, temperature=0)
    second = client.chat.completions.create(model="test-large", messages=MESSAGES, temperature=0)
    streamed = list(
        client.chat.completions.create(
            model="test-large", messages=MESSAGES, temperature=0, stream=True
        )
    )
    assert len(fake_catalog["primary"].requests) == 1
    assert second.choices[0].message.content == first.choices[0].message.content
    assert second.infrai["cache"] is True and second.infrai["cost_nanos"] == 0
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "Echo: hello"
    assert streamed[-1].infrai["cache"] is True
    assert RequestLog.objects.filter(cache_hit=True).count() == 2
    assert LedgerEntry.objects.filter(kind="usage").count() == 1
    # opting out, and another organization, both go to the vendor
    client.chat.completions.create(
        model="test-large", messages=MESSAGES, temperature=0, extra_body={"cache": False}
    )
    client_for(issue_key(org="other")).chat.completions.create(
        model="test-large", messages=MESSAGES, temperature=0
    )
    assert len(fake_catalog["primary"].requests) == 3


def test_rate_limit_is_429_with_retry_after(issue_key, client_for):
    key = issue_key()
    ApiKey.objects.update(requests_per_minute=1)
    client = client_for(key)
    raw = client.chat.completions.with_raw_response.create(model="test-large", messages=MESSAGES)
    assert raw.headers["x-ratelimit-limit-requests"] == "1"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="test-large", messages=MESSAGES)
    assert 1 <= int(info.value.response.headers["retry-after"]) <= 60
    assert info.value.body["code"] == "rate_limit_exceeded"


def test_empty_wallet_is_402_and_never_retried(issue_key, client_for, fake_catalog):
    client = client_for(issue_key(credit_usd="0"), max_retries=3)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="test-large", messages=MESSAGES)
    assert info.value.status_code == 402
    assert info.value.body["code"] == "insufficient_quota"
    assert info.value.response.headers["x-should-retry"] == "false"
    assert fake_catalog["primary"].requests == []
    # One attempt (never retried), in the request log with its status once written (off the
    # response path, so wait for it).
    wait_for(RequestLog.objects.exists)
    assert list(RequestLog.objects.values_list("http_status", "error_code")) == [
        (402, "insufficient_quota")
    ]


def test_tools_plain_and_streamed(issue_key, client_for):
    client = client_for(issue_key())
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
    resp = client.chat.completions.create(model="test-large", messages=MESSAGES, tools=tools)
    calls = resp.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert resp.choices[0].finish_reason == "tool_calls"
    assembled: dict[int, dict[str, str]] = {}
    for chunk in client.chat.completions.create(
        model="test-large", messages=MESSAGES, tools=tools, stream=True
    ):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                slot = assembled.setdefault(delta.index, {"name": "", "arguments": ""})
                slot["name"] += delta.function.name or ""
                slot["arguments"] += delta.function.arguments or ""
    assert [assembled[i]["name"] for i in sorted(assembled)] == ["get_weather", "get_time"]
    assert json.loads(assembled[0]["arguments"]) == {"city": "Paris"}


def test_vision_routes_to_a_vision_model_and_forwards_the_image(
    issue_key, client_for, fake_catalog
):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    resp = client_for(issue_key()).chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": [{"type": "text", "text": "what is this"}, image]}],
    )
    assert resp.infrai["model"] in ("test-large", "claude-fake")
    assert resp.choices[0].message.content == "Echo: what is this"


def test_json_mode(issue_key, client_for):
    resp = client_for(issue_key()).chat.completions.create(
        model="test-large", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}


def test_anthropic_adapter_plain_stream_and_tools(issue_key, client_for, fake_catalog):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model="claude-fake",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi there"},
        ],
    )
    assert resp.choices[0].message.content == "Echo: hi there"
    assert resp.infrai["vendor"] == "anthro" and resp.usage.prompt_tokens == 4
    sent = fake_catalog["anthro"].requests[-1]
    assert sent["system"] == "be brief" and sent["max_tokens"] > 0
    chunks = list(
        client.chat.completions.create(
            model="claude-fake",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Echo: hello"
    assert chunks[-1].usage.completion_tokens == 2
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    resp = client.chat.completions.create(model="claude-fake", messages=MESSAGES, tools=tools)
    assert resp.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert fake_catalog["anthro"].requests[-1]["tools"][0]["input_schema"] == {"type": "object"}


def test_a_vendor_refusing_our_credentials_fails_over(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fail_statuses = [401]
    resp = client_for(issue_key()).chat.completions.create(model="test-large", messages=MESSAGES)
    assert resp.infrai["vendor"] == "backup"


def test_a_vendor_refusing_the_request_itself_is_a_400_without_failover(
    issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fail_statuses = [400]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="test-large", messages=MESSAGES)
    assert info.value.body["code"] == "vendor_rejected_request"
    assert fake_catalog["backup"].requests == []
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_a_stopping_process_bills_the_streams_it_is_relaying(api_base, issue_key, fake_catalog):
    """Daphne drops open streams on SIGTERM without their cleanup; the exit hook bills them."""
    from inference.settlement import settle_now
    from tests.live import floor_of

    with _slow_stream(api_base, issue_key(), fake_catalog["primary"]) as r:
        request_id = r.headers["x-infrai-request-id"]
        lines = r.iter_lines()
        received = [
            line for line, _ in zip(lines, range(6), strict=False) if line.startswith("data: ")
        ]
        assert received
        assert (
            settle_now(floor_of(api_base)) == 1
        )  # what the atexit hook does when the process stops
    log = RequestLog.objects.get(request_id=request_id)
    assert log.error_code == "server_shutdown" and log.output_tokens > 0 and log.cost_nanos > 0
    assert LedgerEntry.objects.get(request_id=request_id).amount_nanos == -log.cost_nanos
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert settle_now(floor_of(api_base)) == 0
