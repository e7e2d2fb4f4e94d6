"""Anthropic's Messages API end to end: the official ``anthropic`` SDK → live app → chat vendors
(the real SmolLM2 on the gpu-backend and the OpenAI-compatible fakes, through the translation to
chat; the fake Anthropic-format vendor, sent the request as it is — its thinking blocks in
``test_messages_native.py``), billed on the ledger exactly as chat is."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from billing.models import Hold, LedgerEntry
from inference.messages.translate import parse_messages_request
from inference.models import RequestLog, RequestStatus
from money.pricing import Usage
from tests.fakes.vendors import png_bytes
from tests.inference.conftest import assert_billed
from tests.inference.test_money_faults import assert_books_clean, assert_settled_once

pytestmark = pytest.mark.usefixtures("gateway_catalog")

SMOL = "SmolLM2-135M-Instruct"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def claude(api_base: str) -> Callable[..., anthropic.Anthropic]:
    """``claude(key)``: the official Anthropic SDK pointed at the live app (it appends
    ``/v1/messages``), sending the key as ``x-api-key`` — or as Bearer with ``bearer=True``."""

    def make(key: str, *, bearer: bool = False) -> anthropic.Anthropic:
        base_url = api_base.removesuffix("/v1")
        if bearer:
            return anthropic.Anthropic(base_url=base_url, auth_token=key, max_retries=0)
        return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)

    return make


def _billed(message: Any, model: str, vendor: str) -> int:
    """The ledger charged the message's usage (Anthropic's semantics: input excludes cache
    reads) and its ``infrai`` cost; returns that cost."""
    usage = message.usage
    cached = usage.cache_read_input_tokens or 0
    five = usage.cache_creation.ephemeral_5m_input_tokens if usage.cache_creation else 0
    hour = usage.cache_creation.ephemeral_1h_input_tokens if usage.cache_creation else 0
    infrai = message.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"],
        model=model,
        vendor=vendor,
        usage=Usage(
            input_tokens=usage.input_tokens + cached + five + hour,
            cached_input_tokens=cached,
            cache_write_5m_tokens=five,
            cache_write_1h_tokens=hour,
            output_tokens=usage.output_tokens,
        ),
    )
    assert cost == infrai["cost_nanos"]
    return cost


def test_text_message_from_a_chat_vendor(issue_key, claude, fakes):
    raw = claude(issue_key()).messages.with_raw_response.create(
        model="test-large",
        max_tokens=64,
        system="You are terse.",
        messages=[{"role": "user", "content": "one two three"}],
        stop_sequences=["END"],
        metadata={"user_id": "u-42"},
        # Anthropic's API takes temperature; this SDK release has no keyword for it.
        extra_body={"temperature": 0.5},
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == "test-large"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Echo: one two three"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 4 and message.usage.input_tokens > 0
    sent = fakes["primary"].requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "one two three"},
    ]
    assert (sent["max_tokens"], sent["stop"], sent["temperature"]) == (64, ["END"], 0.5)
    assert sent["user"] == "u-42"
    assert raw.headers["x-infrai-vendor"] == "primary"
    assert raw.headers["x-infrai-cost-usd"] and raw.headers["x-infrai-request-id"]
    assert _billed(message, "test-large", "primary") > 0
    assert_books_clean()


def test_message_from_the_local_model(issue_key, claude):
    message = claude(issue_key()).messages.create(
        model=SMOL,
        max_tokens=8,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_body={"temperature": 0},
    )
    assert message.content[0].type == "text" and message.content[0].text.strip()
    assert 0 < message.usage.output_tokens <= 8 and message.usage.input_tokens > 5
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.model_extra["infrai"]["vendor"] == "infrai-gpu"
    assert _billed(message, SMOL, "infrai-gpu") > 0
    assert_books_clean()


def test_an_anthropic_format_vendor_is_sent_the_request_as_it_is(issue_key, claude, fakes):
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]
    message = claude(issue_key()).messages.create(
        model="claude-fake", max_tokens=32, messages=messages, extra_body={"prefer": "cheapest"}
    )
    assert message.content[0].text == "Echo: hi there"
    # infrai's own fields (prefer) stay here; the rest is Anthropic's request, untranslated.
    assert fakes["anthro"].requests[-1] == {
        "model": "claude-fake",
        "max_tokens": 32,
        "messages": messages,
    }
    assert _billed(message, "claude-fake", "anthro") > 0
    assert_books_clean()


def test_bearer_authorization_is_accepted(issue_key, claude):
    message = claude(issue_key(), bearer=True).messages.create(
        model="test-large", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
    )
    assert message.content[0].text == "Echo: hello"


def test_stream_with_the_sdk_helper(issue_key, claude):
    client = claude(issue_key())
    with client.messages.stream(
        model="test-large", max_tokens=64, messages=[{"role": "user", "content": "alpha beta"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Echo: alpha beta" == final.content[0].text
    assert final.usage.input_tokens > 0 and final.usage.output_tokens == 3
    assert final.stop_reason == "end_turn"
    log = assert_settled_once(RequestLog.objects.get().request_id)
    assert log.status == RequestStatus.OK and log.endpoint == "messages"
    assert log.output_tokens == 3 and log.cost_nanos > 0
    assert_books_clean()


def test_stream_events_in_anthropic_order(issue_key, claude):
    events = list(
        claude(issue_key()).messages.create(
            model="test-large",
            max_tokens=64,
            messages=[{"role": "user", "content": "one two three"}],
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds == [
        "message_start", "content_block_start", *["content_block_delta"] * 4,
        "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    start = events[0].message
    assert start.usage.input_tokens > 0 and start.content == []
    assert "".join(e.delta.text for e in events[2:6]) == "Echo: one two three"
    delta = events[-2]
    assert delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens == 4
    infrai = delta.model_extra["infrai"]
    entry = LedgerEntry.objects.get(request_id=infrai["request_id"])
    assert -entry.amount_nanos == infrai["cost_nanos"] > 0
    assert_books_clean()


def test_tool_use_and_tool_result_round_trip(issue_key, claude, fakes):
    client = claude(issue_key())
    first = client.messages.create(
        model="test-large",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    (use,) = first.content
    assert use.type == "tool_use" and use.name == "get_weather"
    assert use.input == {"city": "Paris"} and first.stop_reason == "tool_use"
    sent = fakes["primary"].requests[-1]
    assert sent["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}

    second = client.messages.create(
        model="test-large",
        max_tokens=64,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    )
    assert second.content[0].text == "Echo: thanks"
    assert fakes["primary"].requests[-1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": use.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": use.id, "content": "sunny"},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ]
    assert_books_clean()


def test_streamed_tool_use(issue_key, claude):
    with claude(issue_key()).messages.stream(
        model="test-large",
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER_TOOL],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].input == {"city": "Paris"} and final.stop_reason == "tool_use"
    assert_books_clean()


def test_count_tokens_is_our_count_and_free(issue_key, claude):
    body = {
        "model": "test-large",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "How many tokens is this?"}],
    }
    counted = claude(issue_key()).messages.count_tokens(**body)
    assert counted.input_tokens == parse_messages_request(body, count_only=True).chat.prompt_tokens
    assert counted.input_tokens > 0
    assert not Hold.objects.exists() and not LedgerEntry.objects.filter(kind="usage").exists()
    log = RequestLog.objects.get()
    assert (log.endpoint, log.status, log.cost_nanos) == ("messages.count_tokens", "ok", 0)


def test_count_tokens_of_an_unknown_model_is_404(issue_key, claude):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude(issue_key()).messages.count_tokens(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.body["error"]["type"] == "not_found_error"


def test_ignored_fields_are_reported(issue_key, claude):
    raw = claude(issue_key()).messages.with_raw_response.create(
        model="test-large",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
    )
    message = raw.parse()
    assert message.content[0].text == "Echo: hello"
    assert raw.headers["x-infrai-ignored-params"] == "cache_control,thinking"
    assert message.model_extra["infrai"]["ignored_params"] == ["cache_control", "thinking"]
    log = RequestLog.objects.get(request_id=message.model_extra["infrai"]["request_id"])
    assert log.ignored_params == ["cache_control", "thinking"]


def test_unknown_field_is_an_anthropic_400(issue_key, claude):
    with pytest.raises(anthropic.BadRequestError) as info:
        claude(issue_key()).messages.create(
            model="test-large",
            max_tokens=16,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"frobnicate": True},
        )
    assert info.value.status_code == 400
    body = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == "frobnicate"
    assert not Hold.objects.exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
        ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"max_tokens": 8, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]},
         "temperature"),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
          "tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}, "tools[0].name"),
    ],
)  # fmt: skip
def test_invalid_requests_name_the_messages_field(issue_key, api_base, body, param):
    response = httpx.post(
        f"{api_base}/messages",
        json={"model": "test-large", **body},
        headers={"x-api-key": issue_key(), "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param
    assert not Hold.objects.exists()


def test_empty_wallet_is_a_billing_error(issue_key, claude):
    with pytest.raises(anthropic.APIStatusError) as info:
        claude(issue_key(credit_usd="0")).messages.create(
            model="test-large", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.status_code == 402
    assert info.value.body["error"]["type"] == "billing_error"
    assert info.value.response.headers["x-should-retry"] == "false"
    assert not Hold.objects.exists()
    assert_books_clean()


def test_bad_key_is_an_anthropic_authentication_error(claude):
    with pytest.raises(anthropic.AuthenticationError) as info:
        claude("ifr_not_a_real_key").messages.create(
            model="test-large", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "authentication_error"


def test_stream_broken_midway_ends_with_an_error_event(issue_key, claude, fakes):
    fakes["primary"].cut_after = 3
    stream = claude(issue_key()).messages.create(
        model="test-large",
        max_tokens=64,
        messages=[{"role": "user", "content": "one two three four five six"}],
        stream=True,
    )
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in stream:
            seen.append(event.type)
    assert seen[0] == "message_start" and "message_stop" not in seen
    error = info.value.body["error"]
    assert error["type"] == "api_error" and error["code"] == "vendor_stream_interrupted"
    log = assert_settled_once(error["infrai"]["request_id"])
    assert log.status == RequestStatus.VENDOR_ERROR
    assert (
        -sum(e.amount_nanos for e in LedgerEntry.objects.filter(request_id=log.request_id))
        == (error["infrai"]["cost_nanos"])
    )
    assert_books_clean()


def test_the_docs_example_runs_verbatim(issue_key, api_base, monkeypatch, capsys):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = doc.split("## `POST /v1/messages`", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("INFRAI_BASE_URL", api_base.removesuffix("/v1"))
    monkeypatch.setenv("INFRAI_API_KEY", issue_key())
    exec(compile(example, "docs/api.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "input_tokens=" in printed and printed.strip()
    assert_books_clean()


def test_a_deterministic_message_is_answered_from_the_cache(issue_key, claude, fakes):
    client = claude(issue_key())
    ask = {
        "model": "test-large",
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "cache me"}],
        "extra_body": {"temperature": 0},
    }
    first = client.messages.create(**ask)
    calls = len(fakes["primary"].requests)
    second = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert len(fakes["primary"].requests) == calls  # neither reached the vendor
    assert second.content[0].text == first.content[0].text == streamed.content[0].text
    assert second.model_extra["infrai"]["cache"] is True
    assert second.model_extra["infrai"]["cost_nanos"] == 0
    assert not LedgerEntry.objects.filter(request_id=second.model_extra["infrai"]["request_id"])
    assert_books_clean()


def test_an_image_block_is_sent_as_an_image_part(issue_key, claude, fakes):
    data = base64.b64encode(png_bytes("red")).decode()
    message = claude(issue_key()).messages.create(
        model="test-large",
        max_tokens=32,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": data},
                    },
                    {"type": "text", "text": "what is this"},
                ],
            }
        ],
    )
    assert message.content[0].text == "Echo: what is this"
    (part, _text) = fakes["primary"].requests[-1]["messages"][0]["content"]
    assert part == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def test_count_tokens_refuses_what_anthropic_refuses_there(issue_key, api_base):
    response = httpx.post(
        f"{api_base}/messages/count_tokens",
        json={
            "model": "test-large",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        },
        headers={"x-api-key": issue_key()},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["param"] == "max_tokens"


def test_every_field_anthropics_messages_api_accepts_is_in_the_one_list() -> None:
    """The accepted-field list is Anthropic's own: every field of the official SDK's
    ``MessageCreateParams`` and ``MessageCountTokensParams`` is accepted where it belongs."""
    from anthropic.types.message_count_tokens_params import MessageCountTokensParams
    from anthropic.types.message_create_params import MessageCreateParamsBase

    from inference.messages import translate

    assert set(MessageCreateParamsBase.__annotations__) <= set(translate.FIELDS)
    assert set(MessageCountTokensParams.__annotations__) <= translate.COUNT_TOKENS
