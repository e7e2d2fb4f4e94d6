"""The fake Azure OpenAI resource, driven by the official SDK's ``openai.AzureOpenAI`` client.

If the SDK parses what the fake answers and the fake accepts what the SDK sends (its
deployment-scoped URLs, ``api-version`` query and ``api-key`` header), the fake is a faithful
partner for the adapter's tests (``tests/inference/test_vendor_azure.py``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.fakes.azure import API_KEY, FakeAzureOpenAI

API_VERSION = "2024-10-21"
MESSAGES = [{"role": "user", "content": "hello there"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeAzureOpenAI]:
    with FakeAzureOpenAI() as server:
        yield server


@pytest.fixture
def azure(_server: FakeAzureOpenAI) -> FakeAzureOpenAI:
    _server.reset()
    return _server


def _client(azure: FakeAzureOpenAI, **kwargs: object) -> openai.AzureOpenAI:
    options: dict[str, object] = {"api_key": API_KEY, "api_version": API_VERSION}
    options.update(max_retries=0)
    options.update(kwargs)
    return openai.AzureOpenAI(azure_endpoint=azure.endpoint, **options)  # type: ignore[arg-type]


def test_chat_goes_to_the_deployment_with_the_version_and_the_api_key_header(azure):
    resp = _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES)
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "gpt-4o-2024-08-06"  # the deployment's model, not its name
    assert resp.usage.prompt_tokens == 2 and resp.usage.completion_tokens == 3
    assert resp.usage.prompt_tokens_details.cached_tokens == 0
    extra = resp.model_extra or {}
    assert extra["prompt_filter_results"][0]["prompt_index"] == 0
    assert resp.choices[0].model_extra["content_filter_results"]["hate"]["filtered"] is False
    call = azure.calls[-1]
    assert call["path"] == "/openai/deployments/chat-prod/chat/completions"
    assert call["api_version"] == API_VERSION
    assert call["api_key"] == API_KEY and call["authorization"] is None


def test_stream_starts_with_the_prompt_filter_chunk_and_ends_with_usage(azure):
    chunks = list(
        _client(azure).chat.completions.create(
            model="chat-prod",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    first = chunks[0]
    assert first.choices == [] and first.id == "" and first.usage is None
    assert first.model_extra["prompt_filter_results"][0]["content_filter_results"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert all(c.usage is None for c in chunks[1:-1])


def test_tools_plain_and_streamed(azure):
    client = _client(azure)
    resp = client.chat.completions.create(model="chat-prod", messages=MESSAGES, tools=TOOLS)
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert resp.choices[0].finish_reason == "tool_calls"
    assert azure.requests[-1]["tools"] == TOOLS
    arguments = ""
    for chunk in client.chat.completions.create(
        model="chat-prod", messages=MESSAGES, tools=TOOLS, stream=True
    ):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                arguments += delta.function.arguments or ""
    assert json.loads(arguments) == {"city": "Paris"}


def test_vision_and_json_output(azure):
    client = _client(azure)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    resp = client.chat.completions.create(
        model="chat-prod",
        messages=[{"role": "user", "content": [{"type": "text", "text": "what is it"}, image]}],
    )
    assert resp.choices[0].message.content == "Echo: what is it"
    assert azure.requests[-1]["messages"][0]["content"][1] == image
    resp = client.chat.completions.create(
        model="chat-prod", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}


def test_embeddings_and_images(azure):
    client = _client(azure)
    resp = client.embeddings.create(model="embed-prod", input=["alpha beta", "gamma"])
    assert [len(d.embedding) for d in resp.data] == [8, 8]
    assert resp.usage.prompt_tokens == 3 and resp.model == "text-embedding-3-small"
    assert azure.calls[-1]["path"] == "/openai/deployments/embed-prod/embeddings"
    image = client.images.generate(model="images-prod", prompt="a cat", response_format="b64_json")
    assert base64.b64decode(image.data[0].b64_json).startswith(b"\x89PNG")
    assert azure.calls[-1]["path"] == "/openai/deployments/images-prod/images/generations"


def test_the_sdk_raises_its_own_classes_for_azure_errors(azure):
    with pytest.raises(openai.AuthenticationError) as denied:
        _client(azure, api_key="wrong").chat.completions.create(
            model="chat-prod", messages=MESSAGES
        )
    assert denied.value.code == "401"
    with pytest.raises(openai.NotFoundError) as missing:
        _client(azure).chat.completions.create(model="no-such-deployment", messages=MESSAGES)
    assert missing.value.code == "DeploymentNotFound"
    azure.fail_statuses = [429, 500]
    with pytest.raises(openai.RateLimitError) as limited:
        _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES)
    assert limited.value.response.headers["retry-after-ms"] == "1500"
    assert limited.value.response.headers["retry-after"] == "2"
    with pytest.raises(openai.InternalServerError):
        _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES)


def test_the_sdk_retries_after_the_wait_the_fake_names(azure):
    azure.fail_statuses, azure.retry_after_ms = [429], 10
    resp = _client(azure, max_retries=1).chat.completions.create(
        model="chat-prod", messages=MESSAGES
    )
    assert resp.choices[0].message.content == "Echo: hello there"
    assert len(azure.calls) == 2


def test_content_filter_refusal_and_cut_answer(azure):
    azure.content_filter = "prompt"
    with pytest.raises(openai.BadRequestError) as refused:
        _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES)
    assert refused.value.code == "content_filter"
    inner = refused.value.body["innererror"]
    assert inner["code"] == "ResponsibleAIPolicyViolation"
    assert inner["content_filter_result"]["violence"] == {"filtered": True, "severity": "high"}
    azure.content_filter = "completion"
    resp = _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES)
    assert resp.choices[0].finish_reason == "content_filter"
    assert resp.choices[0].message.content == "Echo:"
    chunks = list(
        _client(azure).chat.completions.create(model="chat-prod", messages=MESSAGES, stream=True)
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"


def test_a_request_without_api_version_is_azures_404(azure):
    url = f"{azure.url}/deployments/chat-prod/chat/completions"
    body = {"messages": MESSAGES}
    response = httpx.post(url, json=body, headers={"api-key": API_KEY})
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "404", "message": "Resource not found"}}
    bearer = httpx.post(
        url, params={"api-version": API_VERSION}, json=body,
        headers={"authorization": f"Bearer {API_KEY}"},
    )  # fmt: skip
    assert bearer.status_code == 401


def test_the_models_listing_answers_with_the_key(azure):
    client = _client(azure)
    assert [m.id for m in client.models.list()] == azure.base_models
    assert azure.calls[-1]["path"] == "/openai/models"
    assert azure.calls[-1]["api_version"] == API_VERSION
