"""The fake Gemini API, driven by the official ``google-genai`` SDK.

If the SDK parses what the fake answers (responses, SSE events, errors, the model listing) and
the fake accepts what the SDK sends (its paths, ``x-goog-api-key`` header and request bodies),
the fake is a faithful partner for the adapter's tests (``tests/inference/test_vendor_gemini.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from google import genai
from google.genai import errors, types

from tests.fakes.gemini import FakeGemini, signature
from tests.fakes.vendors import fake_embedding

MODEL = "gemini-fake"
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture(scope="module")
def _server() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


@pytest.fixture
def gemini(_server: FakeGemini) -> FakeGemini:
    _server.reset()
    return _server


def _client(gemini: FakeGemini, api_key: str | None = None) -> genai.Client:
    return genai.Client(
        api_key=api_key or gemini.api_key,
        http_options=types.HttpOptions(base_url=gemini.root),
    )


@pytest.fixture
def sdk(gemini: FakeGemini) -> Iterator[genai.Client]:
    """The SDK's client on the fake (held for the test: a dropped client closes its pool)."""
    client = _client(gemini)
    yield client
    client.close()


def test_generate_content_with_system_instruction_and_config(gemini, sdk):
    resp = sdk.models.generate_content(
        model=MODEL,
        contents="hello there",
        config=types.GenerateContentConfig(
            system_instruction="be brief",
            temperature=0.2,
            top_p=0.9,
            top_k=20,
            max_output_tokens=64,
            stop_sequences=["\n\n"],
            seed=7,
            presence_penalty=0.1,
            frequency_penalty=0.2,
        ),
    )
    assert resp.text == "Echo: hello there"
    assert resp.candidates[0].finish_reason == types.FinishReason.STOP
    assert resp.usage_metadata.prompt_token_count == 4  # "hello there" + "be brief"
    assert resp.usage_metadata.candidates_token_count == 3
    assert resp.response_id == "resp-fake"
    sent = gemini.requests[-1]
    assert sent["path"] == f"/v1beta/models/{MODEL}:generateContent"
    assert sent["key"] == gemini.api_key
    assert sent["body"]["systemInstruction"]["parts"] == [{"text": "be brief"}]
    assert sent["body"]["generationConfig"] == {
        "temperature": 0.2,
        "topP": 0.9,
        "topK": 20,
        "maxOutputTokens": 64,
        "stopSequences": ["\n\n"],
        "seed": 7,
        "presencePenalty": 0.1,
        "frequencyPenalty": 0.2,
    }


def test_candidates_usage_with_thoughts_and_cache(gemini, sdk):
    gemini.cached_tokens, gemini.thoughts_tokens = 2, 5
    resp = sdk.models.generate_content(
        model=MODEL,
        contents="one two three",
        config=types.GenerateContentConfig(candidate_count=2),
    )
    assert [c.index for c in resp.candidates] == [0, 1]
    usage = resp.usage_metadata
    assert (usage.prompt_token_count, usage.cached_content_token_count) == (3, 2)
    assert (usage.candidates_token_count, usage.thoughts_token_count) == (8, 5)
    assert usage.total_token_count == 3 + 8 + 5


def test_stream_is_sse_events_the_sdk_reads(gemini, sdk):
    gemini.thoughts_tokens = 4
    chunks = list(sdk.models.generate_content_stream(model=MODEL, contents="alpha beta"))
    assert gemini.requests[-1]["path"] == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert gemini.requests[-1]["query"] == {"alt": "sse"}
    assert "".join(c.text or "" for c in chunks) == "Echo: alpha beta"
    assert len(chunks) == 3
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].usage_metadata.candidates_token_count == 3
    assert chunks[-1].usage_metadata.thoughts_token_count == 4


def test_function_calling_round_trip_with_thought_signatures(gemini, sdk):

    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_weather"]
            )
        ),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    first = sdk.models.generate_content(model=MODEL, contents="weather?", config=config)
    call = first.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    part = first.candidates[0].content.parts[0]
    assert part.thought_signature == b"sig:get_weather"  # base64 on the wire, bytes in the SDK
    sent = gemini.requests[-1]["body"]
    # The SDK sends the declaration with its proto field names (Google accepts both forms).
    declaration = sent["tools"][0]["functionDeclarations"][0]
    assert declaration["parameters_json_schema"]["type"] == "object"
    assert sent["toolConfig"]["functionCallingConfig"] == {
        "mode": "ANY",
        "allowedFunctionNames": ["get_weather"],
    }
    history = [
        types.Content(role="user", parts=[types.Part.from_text(text="weather?")]),
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"output": 21})],
        ),
    ]
    second = sdk.models.generate_content(model=MODEL, contents=history, config=config)
    assert second.text == "Echo: 21"
    model_turn = gemini.requests[-1]["body"]["contents"][1]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][0]["thoughtSignature"] == signature("get_weather")


def test_a_function_call_sent_back_without_its_signature_is_refused(gemini, sdk):
    history = [
        types.Content(role="user", parts=[types.Part.from_text(text="weather?")]),
        types.Content(
            role="model",
            parts=[types.Part.from_function_call(name="get_weather", args={"city": "Paris"})],
        ),
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"output": 21})],
        ),
    ]
    with pytest.raises(errors.ClientError) as info:
        sdk.models.generate_content(model=MODEL, contents=history)
    assert info.value.code == 400 and "thought_signature" in info.value.message


def test_json_output(gemini, sdk):
    resp = sdk.models.generate_content(
        model=MODEL,
        contents="give json",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        ),
    )
    assert resp.parsed == {"ok": True}
    config = gemini.requests[-1]["body"]["generationConfig"]
    assert config["responseJsonSchema"]["properties"]["ok"] == {"type": "boolean"}


def test_inline_image(gemini, sdk):
    image = types.Part.from_bytes(data=b"\x89PNG\r\n\x1a\n", mime_type="image/png")
    resp = sdk.models.generate_content(model=MODEL, contents=[image, "what is this"])
    assert resp.text == "Echo: what is this"
    parts = gemini.requests[-1]["body"]["contents"][0]["parts"]
    assert parts[0]["inlineData"] == {"mimeType": "image/png", "data": "iVBORw0KGgo="}
    assert resp.usage_metadata.prompt_token_count == 85 + 3


def test_a_blocked_prompt_and_a_safety_finish(gemini, sdk):

    gemini.block_reason = "SAFETY"
    blocked = sdk.models.generate_content(model=MODEL, contents="something bad")
    assert blocked.candidates is None
    assert blocked.prompt_feedback.block_reason == types.BlockedReason.SAFETY
    gemini.block_reason, gemini.finish = "", "SAFETY"
    cut = sdk.models.generate_content(model=MODEL, contents="a b c")
    assert cut.candidates[0].finish_reason == types.FinishReason.SAFETY
    assert cut.text == "Echo:"


def test_embed_content_batches_with_output_dimensionality(gemini, sdk):
    resp = sdk.models.embed_content(
        model="gemini-embed-fake",
        contents=["first text", "second"],
        config=types.EmbedContentConfig(output_dimensionality=4),
    )
    assert [e.values for e in resp.embeddings] == [
        pytest.approx(fake_embedding("first text", 4)),
        pytest.approx(fake_embedding("second", 4)),
    ]
    sent = gemini.requests[-1]
    assert sent["path"] == "/v1beta/models/gemini-embed-fake:batchEmbedContents"
    assert sent["body"]["requests"][0] == {
        "model": "models/gemini-embed-fake",
        "content": {"parts": [{"text": "first text"}], "role": "user"},
        "outputDimensionality": 4,
    }


def test_models_list_follows_page_tokens(gemini, sdk):
    gemini.models = [f"gemini-m{i}" for i in range(5)]
    try:
        pager = sdk.models.list(config=types.ListModelsConfig(page_size=2))
        names = [m.name for m in pager]
    finally:
        gemini.models = ["gemini-fake", "gemini-embed-fake"]
    assert names == [f"models/gemini-m{i}" for i in range(5)]
    assert [r["query"].get("pageToken") for r in gemini.requests] == [None, "2", "4"]


@pytest.mark.parametrize(
    ("status", "grpc", "kind"),
    [
        (400, "INVALID_ARGUMENT", errors.ClientError),
        (403, "PERMISSION_DENIED", errors.ClientError),
        (404, "NOT_FOUND", errors.ClientError),
        (429, "RESOURCE_EXHAUSTED", errors.ClientError),
        (500, "INTERNAL", errors.ServerError),
        (503, "UNAVAILABLE", errors.ServerError),
    ],
)
def test_errors_in_googles_shape(gemini, sdk, status, grpc, kind):
    gemini.fail_statuses = [status]
    with pytest.raises(kind) as info:
        sdk.models.generate_content(model=MODEL, contents="hi")
    assert (info.value.code, info.value.status) == (status, grpc)
    assert info.value.message == f"fake failure {status}"


def test_rate_limit_details_and_a_streamed_error(gemini, sdk):
    gemini.fail_statuses, gemini.quota_exhausted = [429], True
    with pytest.raises(errors.ClientError) as info:
        list(sdk.models.generate_content_stream(model=MODEL, contents="hi"))
    assert info.value.code == 429
    details = info.value.details["error"]["details"]
    assert "PerDay" in details[0]["violations"][0]["quotaId"]
    assert details[1]["retryDelay"] == "7s"


def test_a_wrong_key_and_an_unknown_model(gemini, sdk):
    wrong = _client(gemini, api_key="wrong")
    with pytest.raises(errors.ClientError) as info:
        wrong.models.generate_content(model=MODEL, contents="hi")
    assert (info.value.code, info.value.status) == (400, "INVALID_ARGUMENT")
    assert info.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    with pytest.raises(errors.ClientError) as info:
        sdk.models.generate_content(model="gemini-nope", contents="hi")
    assert (info.value.code, info.value.status) == (404, "NOT_FOUND")


def test_the_fake_refuses_what_gemini_refuses(gemini):
    """Strict where Gemini is: a field it does not know, a role it does not take."""
    url = f"{gemini.url}/models/{MODEL}:generateContent"
    headers = {"x-goog-api-key": gemini.api_key}
    contents = [{"role": "user", "parts": [{"text": "hi"}]}]
    for body in (
        {"contents": contents, "generationConfig": {"maxTokens": 5}},
        {"contents": contents, "messages": []},
        {"contents": [{"role": "assistant", "parts": [{"text": "hi"}]}]},
        {"contents": [{"role": "user", "parts": [{"text": "hi", "image": "x"}]}]},
    ):
        response = httpx.post(url, json=body, headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
