"""The Responses API end to end: the official SDK → live app → chat vendors (the real SmolLM2 on
the gpu-backend, fakes for tools, failover and broken streams), billed on the ledger."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from billing.models import Hold
from inference.chat.validation import PENALTY_MESSAGE
from money.pricing import Usage
from tests.inference.conftest import assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

SMOL = "SmolLM2-135M-Instruct"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _billed(infrai: dict, usage, model: str, vendor: str) -> int:
    return assert_billed(
        infrai["request_id"],
        model=model,
        vendor=vendor,
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
    )


def test_plain_response_from_the_local_model(issue_key, client_for):
    raw = client_for(issue_key()).responses.with_raw_response.create(
        model=SMOL,
        instructions="Answer in one short sentence.",
        input="What is the capital of France?",
        max_output_tokens=8,
        temperature=0,
    )
    resp = raw.parse()
    assert resp.object == "response" and resp.id.startswith("resp_")
    assert resp.model == SMOL and resp.status in ("completed", "incomplete")
    assert isinstance(resp.output_text, str) and resp.output_text.strip()
    assert 0 < resp.usage.output_tokens <= 8 and resp.usage.input_tokens > 10
    assert resp.instructions == "Answer in one short sentence." and resp.max_output_tokens == 8
    infrai = resp.model_extra["infrai"]
    assert infrai["vendor"] == "infrai-gpu" and raw.headers["x-infrai-model"] == SMOL
    assert _billed(infrai, resp.usage, SMOL, "infrai-gpu") == infrai["cost_nanos"] > 0


def test_streamed_response_from_the_local_model(issue_key, client_for):
    events = list(
        client_for(issue_key()).responses.create(
            model=SMOL, input="Count from one to five.", max_output_tokens=8, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == f"response.{final.response.status}"
    assert final.type in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == final.response.output_text
    infrai = final.response.model_extra["infrai"]
    assert _billed(infrai, final.response.usage, SMOL, "infrai-gpu") == infrai["cost_nanos"] > 0


def test_stream_event_sequence_on_a_fake_vendor(issue_key, client_for):
    events = list(
        client_for(issue_key()).responses.create(
            model="test-large", input="one two three", stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * 4,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    final = events[-1].response
    assert final.output_text == "Echo: one two three" == events[-4].text
    assert final.usage.output_tokens == 4 and final.status == "completed"


def test_message_array_with_function_tools(issue_key, client_for, fakes):
    resp = client_for(issue_key()).responses.create(
        model="test-large",
        instructions="You are a weather bot.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    (call,) = resp.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id == "call_0"
    sent = fakes["primary"].requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": [{"type": "text", "text": "Paris?"}]},
    ]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_function_call_outputs_become_tool_messages(issue_key, client_for, fakes):
    resp = client_for(issue_key()).responses.create(
        model="test-large",
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_9", "output": "sunny"},
            {"role": "user", "content": "Thanks!"},
        ],
    )  # fmt: skip
    assert resp.output_text == "Echo: Thanks!"
    messages = fakes["primary"].requests[-1]["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_9"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}


def test_streamed_tool_call_events(issue_key, client_for):
    events = list(
        client_for(issue_key()).responses.create(
            model="test-large", input="Paris?", tools=[WEATHER_TOOL], stream=True
        )
    )
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(done) == 1 and json.loads(done[0].arguments) == {"city": "Paris"}
    assert "".join(deltas) == done[0].arguments and len(deltas) == 2
    assert events[-1].response.output[0].name == "get_weather"


def test_failover_to_the_backup_vendor(issue_key, client_for, fakes):
    fakes["primary"].fail_statuses = [502]
    resp = client_for(issue_key()).responses.create(model="test-large", input="hi")
    infrai = resp.model_extra["infrai"]
    assert (infrai["vendor"], infrai["failovers"]) == ("backup", 1)
    _billed(infrai, resp.usage, "test-large", "backup")


def test_a_broken_stream_ends_with_response_failed_and_bills_what_was_delivered(
    issue_key, client_for, fakes
):
    fakes["primary"].cut_after = 3
    events = list(
        client_for(issue_key()).responses.create(
            model="test-large", input="one two three four five", stream=True
        )
    )
    final = events[-1]
    assert final.type == "response.failed" and final.response.status == "failed"
    infrai = final.response.model_extra["infrai"]
    assert infrai["usage_estimated"] is True
    _billed(infrai, final.response.usage, "test-large", "primary")


def test_penalties_are_refused_with_the_spec_text(issue_key, client_for):
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).responses.create(
            model="test-large", input="hi", extra_body={"frequency_penalty": 0.5}
        )
    error = caught.value.body
    assert error["message"] == PENALTY_MESSAGE.format(name="frequency_penalty", value="0.5")
    assert error["message"].startswith("Invalid value for 'frequency_penalty': 0.5. This deploy")
    assert (error["code"], error["param"]) == ("invalid_value", "frequency_penalty")
    assert not Hold.objects.exists()


@pytest.mark.parametrize(
    ("body", "param"),
    [({"model": "test-large"}, "input"),
     ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
     ({"input": "x", "temperature": 3}, "temperature"),
     ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
     ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
     ({"input": "x", "previous_response_id": 5}, "previous_response_id"),
     ({"input": "x", "model": "test-small"}, "model"),
     ({"input": "x", "model": SMOL, "tools": [WEATHER_TOOL]}, "tools")],
)  # fmt: skip
def test_bad_requests_are_400_before_any_hold(issue_key, api_base, fakes, body, param):
    response = httpx.post(
        f"{api_base}/responses", json=body, headers={"authorization": f"Bearer {issue_key()}"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert not Hold.objects.exists() and not fakes["primary"].requests


def test_every_field_openais_responses_api_accepts_is_in_the_one_list() -> None:
    """The accepted-field list is OpenAI's own: every field of the official SDK's
    ``ResponseCreateParams`` has a handling, and the refused ones say what to do instead."""
    from openai.types.responses.response_create_params import ResponseCreateParamsBase

    from inference.responses import translate

    assert set(ResponseCreateParamsBase.__annotations__) <= set(translate.FIELDS)
    unsupported = {n for n, h in translate.FIELDS.items() if h is translate.Handling.UNSUPPORTED}
    assert unsupported == set(translate._UNSUPPORTED)


def test_accepted_fields_a_chat_vendor_is_not_sent_are_reported(issue_key, api_base, fakes):
    """Fields agents send that a chat completion has no use for are accepted, kept from the
    vendor and named in ``X-Infrai-Ignored-Params``; a field OpenAI does not accept is refused."""
    headers = {"authorization": f"Bearer {issue_key()}"}
    body = {
        "model": "test-large",
        "input": "hi",
        "truncation": "auto",
        "include": ["reasoning.encrypted_content"],
        "top_logprobs": 2,
        "prompt_cache_retention": "24h",
        "reasoning": {"summary": "auto"},
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    response = httpx.post(f"{api_base}/responses", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    reported = set(response.headers["x-infrai-ignored-params"].split(","))
    assert reported >= {
        "truncation",
        "include",
        "top_logprobs",
        "prompt_cache_retention",
        "reasoning.summary",
        "context_management",
    }
    sent = fakes["primary"].requests[-1]
    assert not {"truncation", "include", "top_logprobs", "context_management"} & set(sent)
    refused = httpx.post(
        f"{api_base}/responses", json={**body, "frobnicate": 1}, headers=headers, timeout=30
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "frobnicate"
