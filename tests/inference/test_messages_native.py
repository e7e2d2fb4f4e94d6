"""``/v1/messages`` passed through to an Anthropic-format vendor: the official ``anthropic`` SDK →
live app → the fake Anthropic API that thinks (``tests/fakes/anthropic_native.py``). Its signed
thinking blocks must reach the client unchanged — whole, and in a stream byte for byte — the
caller's ``anthropic-version`` / ``anthropic-beta`` headers and ``cache_control`` must reach the
vendor, and the call is billed on the ledger as any other."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from catalog.documents import catalog_load
from catalog.models import Vendor
from inference.models import RequestStatus
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.anthropic_native import SIGNATURE, THINKING, FakeAnthropic
from tests.inference.test_messages import _billed
from tests.inference.test_money_faults import assert_books_clean, assert_settled_once

KEY_ENV = "FAKE_NATIVE_ANTHROPIC_KEY"
THINK = {"type": "enabled", "budget_tokens": 1024}
BETA = "interleaved-thinking-2025-05-14"


@pytest.fixture(scope="module")
def _native_server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def native(
    _native_server: FakeAnthropic, transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> FakeAnthropic:
    """The catalog with only ``claude-think`` (chat, tools) on the fake (adapter ``anthropic``,
    upstream ``claude-think-upstream``) routable."""
    _native_server.reset()
    monkeypatch.setenv(KEY_ENV, _native_server.api_key)
    vendor = catalog_vendor(
        "anth-native",
        base_url=_native_server.url,
        verified_models=["claude-think-upstream"],
        adapter_kind="anthropic",
        credentials_env=KEY_ENV,
    )
    model = catalog_model(
        "claude-think",
        quality_tier=8,
        capabilities=["chat", "tools"],
        offerings=[offering("anth-native", "claude-think-upstream", PRICE)],
    )
    Vendor.objects.exclude(name="anth-native").update(enabled=False)
    catalog_load({"vendors": [vendor], "models": [model]})
    return _native_server


@pytest.fixture
def client(api_base: str, issue_key) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=api_base.removesuffix("/v1"), api_key=issue_key(), max_retries=0
    )


def test_signed_thinking_blocks_arrive_unchanged(native, client):
    raw = client.messages.with_raw_response.create(
        model="claude-think",
        max_tokens=2048,
        thinking=THINK,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello there"}],
        extra_headers={"anthropic-beta": BETA},
    )
    message = raw.parse()
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.signature == SIGNATURE
    assert thinking.thinking == THINKING and text.text == "Echo: hello there"
    assert message.model == "claude-think" and message.id.startswith("msg_")
    sent, headers = native.requests[-1], native.headers[-1]
    assert sent["model"] == "claude-think-upstream" and sent["thinking"] == THINK
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert headers["anthropic-beta"] == BETA
    assert headers["anthropic-version"] == raw.http_request.headers["anthropic-version"]
    assert "x-infrai-ignored-params" not in raw.headers  # thinking, cache_control: forwarded
    assert message.model_extra["infrai"]["vendor"] == "anth-native"
    assert _billed(message, "claude-think", "anth-native") > 0
    assert_books_clean()


def test_a_thinking_turn_goes_back_to_the_vendor_as_it_came(native, client):
    first = client.messages.create(
        model="claude-think",
        max_tokens=2048,
        thinking=THINK,
        messages=[{"role": "user", "content": "hello"}],
    )
    history = [block.model_dump(exclude_none=True) for block in first.content]
    client.messages.create(
        model="claude-think",
        max_tokens=2048,
        thinking=THINK,
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": history},
            {"role": "user", "content": "again"},
        ],
    )
    assert native.requests[-1]["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THINKING,
        "signature": SIGNATURE,
    }
    assert_books_clean()


def test_streamed_signature_is_relayed_byte_for_byte(native, api_base, issue_key):
    body = {
        "model": "claude-think",
        "max_tokens": 2048,
        "thinking": THINK,
        "stream": True,
        "messages": [{"role": "user", "content": "one two three"}],
    }
    headers = {"x-api-key": issue_key(), "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{api_base}/messages", json=body, headers=headers) as response:
        assert response.status_code == 200
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    signature_events = [d for d in native.sent if "signature_delta" in d]
    assert len(signature_events) == 1 and signature_events[0] in data
    relayed_deltas = [d for d in native.sent if '"content_block_' in d]
    assert [d for d in data if '"content_block_' in d] == relayed_deltas
    events = [json.loads(d) for d in data]
    start, delta = events[0], events[-2]
    assert start["message"]["model"] == "claude-think"
    assert start["message"]["usage"]["input_tokens"] == 3
    assert delta["type"] == "message_delta" and delta["delta"]["stop_reason"] == "end_turn"
    assert delta["infrai"]["cost_nanos"] > 0 and events[-1] == {"type": "message_stop"}
    assert_books_clean()


def test_streamed_thinking_with_the_sdk(native, client):
    with client.messages.stream(
        model="claude-think",
        max_tokens=2048,
        thinking=THINK,
        messages=[{"role": "user", "content": "alpha beta"}],
    ) as stream:
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.signature == SIGNATURE and thinking.thinking == THINKING
    assert text.text == "Echo: alpha beta"
    assert final.usage.output_tokens > 0 and final.usage.input_tokens == 2
    assert_books_clean()


def test_cache_reads_reported_by_the_vendor_are_billed_at_the_cached_price(native, client):
    native.cache_read = 2
    message = client.messages.create(
        model="claude-think",
        max_tokens=2048,
        messages=[{"role": "user", "content": "a cached prompt of six words"}],
    )
    assert message.usage.cache_read_input_tokens == 2 and message.usage.input_tokens == 4
    assert _billed(message, "claude-think", "anth-native") > 0
    assert_books_clean()


def test_a_native_stream_broken_midway_ends_with_an_error_event(native, client):
    native.cut_after = 5  # message_start, the thinking block's start and three deltas
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in client.messages.create(
            model="claude-think",
            max_tokens=2048,
            thinking=THINK,
            messages=[{"role": "user", "content": "one two"}],
            stream=True,
        ):
            seen.append(event.type)
    assert seen[0] == "message_start" and "message_stop" not in seen
    error = info.value.body["error"]
    assert error["code"] == "vendor_stream_interrupted"
    log = assert_settled_once(error["infrai"]["request_id"])
    assert log.status == RequestStatus.VENDOR_ERROR and log.output_tokens > 0
    assert log.cost_nanos == error["infrai"]["cost_nanos"] > 0
    assert_books_clean()
