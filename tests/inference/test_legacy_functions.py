"""OpenAI's legacy function calling (``functions`` / ``function_call``): read as tools, and
answered back as ``function_call`` through the live app."""

from __future__ import annotations

import json

import pytest

from config.errors import InvalidRequest
from inference.chat.validation import parse_chat_request, to_legacy_function_call

USER = [{"role": "user", "content": "weather?"}]
WEATHER = {"name": "get_weather", "parameters": {"type": "object"}}


def test_functions_become_tools_and_function_call_a_tool_choice():
    chat = parse_chat_request(
        {"messages": USER, "functions": [WEATHER], "function_call": {"name": "get_weather"}}
    )
    assert chat.legacy_functions
    assert chat.payload["tools"] == [{"type": "function", "function": WEATHER}]
    assert chat.payload["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "functions" not in chat.payload and "tools" in chat.capabilities
    auto = parse_chat_request({"messages": USER, "functions": [WEATHER], "function_call": "auto"})
    assert auto.payload["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"functions": [WEATHER], "tools": []}, "functions"),
        ({"functions": "get_weather"}, "functions"),
        ({"functions": [{"name": "has space"}]}, "functions[0].name"),
        ({"functions": [WEATHER], "function_call": {"name": "other"}}, "function_call"),
        ({"functions": [WEATHER], "function_call": 3}, "function_call"),
    ],
)
def test_bad_legacy_fields_are_400s_named_as_sent(extra, param):
    with pytest.raises(InvalidRequest) as err:
        parse_chat_request({"messages": USER, **extra})
    assert err.value.param == param


def test_answers_render_back_as_function_call():
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
            }
        ]
    }
    choice = to_legacy_function_call(body)["choices"][0]
    assert choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert "tool_calls" not in choice["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stream", [False, True])
def test_a_legacy_functions_caller_gets_function_call_back(
    stream, issue_key, client_for, fake_catalog
):
    client = client_for(issue_key())
    kwargs = {
        "model": "test-large",
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
    }
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        assert message.function_call.name == "get_weather" and not message.tool_calls
        assert json.loads(message.function_call.arguments) == {"city": "Paris"}
        return
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    calls = [c.choices[0].delta.function_call for c in chunks if c.choices]
    assert any(call and call.name == "get_weather" for call in calls)
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "function_call"
