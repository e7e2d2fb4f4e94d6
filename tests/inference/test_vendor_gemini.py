"""Google Gemini end to end: the official ``openai`` SDK → live app → the Gemini adapter → the
fake Gemini API (``tests/fakes/gemini.py``, itself checked by
``tests/vendors/test_gemini_fidelity.py``).

The catalog (:func:`gemini_catalog`) puts ``gem-chat`` on the fake's ``gemini-fake`` (priority
10) with the OpenAI-compatible fake ``backup`` behind it (priority 20), and ``gem-embed`` on
``gemini-embed-fake``. Covered: chat (plain, streamed, tools with the thought-signature round
trip, vision by data URL and by http URL, JSON output, sampling), embeddings, each Gemini error
class and what the gateway does with it (fail over, or refuse without failing over), safety
(a blocked prompt, a cut answer), the probe, and the money: prompt, cached and completion
tokens (thoughts included) billed exactly on the ledger.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import openai
import pytest

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import catalog_load
from catalog.models import Vendor
from catalog.services import vendor_probe
from inference import tokens
from inference.vendors import errors, http
from inference.vendors.base import VendorTarget
from inference.vendors.gemini import SIGNATURE_MARK, GeminiAdapter, generation_config
from inference.vendors.registry import adapter_for
from money.pricing import Usage
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.gemini import FakeGemini, signature
from tests.fakes.vendors import FakeVendor, fake_embedding, png_bytes
from tests.inference.conftest import EMBED_PRICE, assert_billed

MESSAGES = [{"role": "user", "content": "hello there"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
KEY_ENV = "FAKE_GEMINI_KEY"
T = TypeVar("T")


@pytest.fixture(scope="session")
def _gemini_server() -> Iterator[FakeGemini]:
    with FakeGemini() as server:
        yield server


@pytest.fixture
def gemini(_gemini_server: FakeGemini) -> FakeGemini:
    """The fake Gemini API, its behaviours reset."""
    _gemini_server.reset()
    return _gemini_server


@pytest.fixture
def gemini_catalog(
    gemini: FakeGemini,
    fakes: dict[str, FakeVendor],
    transactional_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> FakeGemini:
    """The catalog with only ``gem`` (the fake Gemini API, adapter ``gemini``) and ``backup``
    (an OpenAI-compatible FakeVendor) routable:

    - ``gem-chat`` (chat, vision, tools, json): gem ``gemini-fake`` (10), backup (20);
    - ``gem-embed`` (embeddings): gem ``gemini-embed-fake``.
    """
    monkeypatch.setenv(KEY_ENV, gemini.api_key)
    vendors = [
        catalog_vendor(
            "gem",
            base_url=gemini.url,
            verified_models=["gemini-fake", "gemini-embed-fake"],
            display_name="Google Gemini",
            adapter_kind="gemini",
            credentials_env=KEY_ENV,
            region="global",
        ),
        catalog_vendor("backup", base_url=fakes["backup"].url, verified_models=["up-large"]),
    ]
    models = [
        catalog_model(
            "gem-chat",
            quality_tier=9,
            capabilities=["chat", "vision", "tools", "json_mode"],
            offerings=[
                offering("gem", "gemini-fake", PRICE, priority=10),
                offering("backup", "up-large", PRICE, priority=20),
            ],
        ),
        catalog_model(
            "gem-embed",
            quality_tier=6,
            capabilities=["embeddings"],
            offerings=[offering("gem", "gemini-embed-fake", EMBED_PRICE, priority=10)],
        ),
    ]
    Vendor.objects.exclude(name__in=[v["name"] for v in vendors]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})
    return gemini


pytestmark = pytest.mark.usefixtures("gemini_catalog")


def _sent(gemini: FakeGemini) -> dict[str, Any]:
    return gemini.requests[-1]["body"]


def _run(call: Awaitable[T]) -> T:
    """``call`` on a loop of its own, the adapter's HTTP session closed with it."""

    async def run() -> T:
        try:
            return await call
        finally:
            await http.close()

    return asyncio.run(run())


def _target(gemini: FakeGemini, **kwargs: Any) -> VendorTarget:
    options: dict[str, Any] = {
        "vendor": "gem",
        "base_url": gemini.url,
        "upstream_model": "gemini-fake",
        "api_key": gemini.api_key,
    }
    options.update(kwargs)
    return VendorTarget(**options)


# --- chat ---------------------------------------------------------------------------------
def test_chat_is_generate_content_with_the_key_header_and_billed_exactly(
    issue_key, client_for, gemini
):
    resp = client_for(issue_key()).chat.completions.create(
        model="gem-chat",
        messages=[{"role": "system", "content": "be brief"}, *MESSAGES],
        temperature=0.3,
        top_p=0.8,
        max_tokens=50,
        stop="END",
        seed=3,
    )
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.infrai["vendor"] == "gem"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (4, 3)
    sent = gemini.requests[-1]
    assert sent["path"] == "/v1beta/models/gemini-fake:generateContent"
    assert sent["key"] == gemini.api_key
    assert sent["body"]["contents"] == [{"role": "user", "parts": [{"text": "hello there"}]}]
    assert sent["body"]["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert sent["body"]["generationConfig"] == {
        "temperature": 0.3,
        "topP": 0.8,
        "maxOutputTokens": 50,
        "stopSequences": ["END"],
        "seed": 3,
    }
    assert_billed(
        resp.infrai["request_id"],
        model="gem-chat",
        vendor="gem",
        usage=Usage(input_tokens=4, output_tokens=3),
    )


def test_cached_and_thought_tokens_are_billed_exactly(issue_key, client_for, gemini):
    gemini.cached_tokens, gemini.thoughts_tokens = 3, 6
    resp = client_for(issue_key()).chat.completions.create(
        model="gem-chat", messages=[{"role": "user", "content": "one two three four"}]
    )
    usage = resp.usage
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (4, 3)
    # "Echo: one two three four" is 5 visible tokens, plus 6 of thoughts.
    assert (usage.completion_tokens, usage.total_tokens) == (11, 15)
    # The adapter reports the thoughts as reasoning (what lets the gateway accept the 11).
    direct = _run(GeminiAdapter().chat(_target(gemini), {"messages": MESSAGES}))
    assert direct["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}
    assert direct["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    cost = assert_billed(
        resp.infrai["request_id"],
        model="gem-chat",
        vendor="gem",
        usage=Usage(input_tokens=4, cached_input_tokens=3, output_tokens=11),
    )
    # $1 / 1M new input, $0.50 cached, $2 output: (1 × 1 + 3 × 0.5 + 11 × 2) × 1,000 nanos.
    assert cost == 24_500


def test_stream_relays_sse_events_and_bills_the_final_usage(issue_key, client_for, gemini):
    gemini.thoughts_tokens = 2
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="gem-chat",
            messages=[{"role": "user", "content": "alpha beta gamma"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert gemini.requests[-1]["path"] == "/v1beta/models/gemini-fake:streamGenerateContent"
    assert gemini.requests[-1]["query"] == {"alt": "sse"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: alpha beta gamma"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 4 + 2)
    assert_billed(
        chunks[-1].infrai["request_id"],
        model="gem-chat",
        vendor="gem",
        usage=Usage(input_tokens=3, output_tokens=6),
    )


def test_penalties_map_where_a_caller_may_send_them():
    # The gateway accepts only 0 penalties and never forwards them (the compatibility spec);
    # the adapter still maps them for the day it does.
    config = generation_config({"presence_penalty": 0.5, "frequency_penalty": 0.25, "top_k": 4})
    assert config == {"presencePenalty": 0.5, "frequencyPenalty": 0.25, "topK": 4}


def test_n_is_candidate_count(issue_key, client_for, gemini):
    resp = client_for(issue_key()).chat.completions.create(model="gem-chat", messages=MESSAGES, n=2)
    assert [c.index for c in resp.choices] == [0, 1]
    assert {c.message.content for c in resp.choices} == {"Echo: hello there"}
    assert _sent(gemini)["generationConfig"] == {"candidateCount": 2}
    assert resp.usage.completion_tokens == 6


# --- tools --------------------------------------------------------------------------------
def test_tools_calls_results_and_thought_signatures_round_trip(issue_key, client_for, gemini):
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="gem-chat", messages=MESSAGES, tools=TOOLS)
    sent = _sent(gemini)
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "parametersJsonSchema": TOOLS[0]["function"]["parameters"],
                },
                {"name": "get_time", "parametersJsonSchema": {"type": "object"}},
            ]
        }
    ]
    assert "toolConfig" not in sent
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert calls[0].id.startswith("call_") and len({c.id for c in calls}) == 2
    assert calls[0].id.endswith(SIGNATURE_MARK + signature("get_weather"))
    # The same answer streamed gets the same ids.
    streamed: dict[int, dict[str, str]] = {}
    for chunk in client.chat.completions.create(
        model="gem-chat", messages=MESSAGES, tools=TOOLS, stream=True
    ):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            slot = streamed.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += delta.id or ""
            slot["name"] += delta.function.name or ""
            slot["arguments"] += delta.function.arguments or ""
    assert [streamed[i]["id"] for i in sorted(streamed)] == [c.id for c in calls]
    # The results go back as functionResponse parts named after their calls, and the calls
    # with their signatures (the fake, like Gemini 3, refuses a call without one).
    history = [
        *MESSAGES,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": calls[1].id, "content": "noon"},
    ]
    answer = client.chat.completions.create(model="gem-chat", messages=history, tools=TOOLS)
    assert answer.choices[0].message.content == 'Echo: {"temp": 21} "noon"'
    contents = _sent(gemini)["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"][0] == {
        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
        "thoughtSignature": signature("get_weather"),
    }
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": {"temp": 21}}}},
        {"functionResponse": {"name": "get_time", "response": {"output": "noon"}}},
    ]


@pytest.mark.parametrize(
    ("tool_choice", "config", "called"),
    [
        ("none", {"mode": "NONE"}, []),
        ("required", {"mode": "ANY"}, ["get_weather", "get_time"]),
        (
            {"type": "function", "function": {"name": "get_time"}},
            {"mode": "ANY", "allowedFunctionNames": ["get_time"]},
            ["get_time"],
        ),
    ],
)
def test_tool_choice_is_function_calling_config(
    issue_key, client_for, gemini, tool_choice, config, called
):
    resp = client_for(issue_key()).chat.completions.create(
        model="gem-chat", messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice
    )
    assert _sent(gemini)["toolConfig"] == {"functionCallingConfig": config}
    assert [c.function.name for c in resp.choices[0].message.tool_calls or []] == called


# --- vision and JSON ----------------------------------------------------------------------
def test_images_by_data_url_and_by_http_url_are_sent_inline(
    issue_key, client_for, gemini, fakes, settings
):
    settings.INFRAI_FETCH_PRIVATE_URLS = True  # the image server is on 127.0.0.1
    url = fakes["backup"].url + "/files/cat.png"  # a real PNG served over HTTP
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    resp = client_for(issue_key()).chat.completions.create(
        model="gem-chat", messages=[{"role": "user", "content": content}]
    )
    assert resp.choices[0].message.content == "Echo: what is this"
    parts = _sent(gemini)["contents"][0]["parts"]
    assert parts[1] == {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}
    assert parts[2]["inlineData"]["mimeType"] == "image/png"
    assert base64.b64decode(parts[2]["inlineData"]["data"]) == png_bytes("cat")


def test_an_image_url_that_cannot_be_fetched_is_a_400_without_failover(
    issue_key, client_for, gemini, fakes, settings
):
    settings.INFRAI_FETCH_PRIVATE_URLS = True
    url = fakes["backup"].url + "/no-such-image.png"
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(
            model="gem-chat", messages=[{"role": "user", "content": content}]
        )
    assert info.value.body["code"] == "invalid_image_url"
    assert url not in info.value.body["message"]
    assert gemini.requests == [] and fakes["backup"].requests == []


def test_json_object_and_json_schema_output(issue_key, client_for, gemini):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model="gem-chat", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}
    assert _sent(gemini)["generationConfig"] == {"responseMimeType": "application/json"}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    resp = client.chat.completions.create(
        model="gem-chat",
        messages=MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}
    assert _sent(gemini)["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
    }


# --- safety -------------------------------------------------------------------------------
def test_a_blocked_prompt_is_a_content_filter_400_without_failover_or_charge(
    issue_key, client_for, gemini, fakes
):
    gemini.block_reason = "PROHIBITED_CONTENT"
    client = client_for(issue_key())
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            resp = client.chat.completions.create(
                model="gem-chat", messages=MESSAGES, stream=stream
            )
            list(resp) if stream else None
        assert info.value.body["code"] == "content_filter"
        assert "PROHIBITED_CONTENT" in info.value.body["message"]
    assert fakes["backup"].requests == []
    assert not LedgerEntry.objects.filter(kind="usage").exists()
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_an_answer_cut_for_safety_ends_with_content_filter(issue_key, client_for, gemini):
    gemini.finish = "SAFETY"
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="gem-chat", messages=MESSAGES)
    assert resp.choices[0].finish_reason == "content_filter"
    assert resp.choices[0].message.content == "Echo:"
    chunks = list(client.chat.completions.create(model="gem-chat", messages=MESSAGES, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"


# --- errors and failover ------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 500, 503, 403, 404])
def test_vendor_failures_fail_over_to_the_openai_compatible_backup(
    issue_key, client_for, gemini, fakes, status
):
    gemini.fail_statuses = [status, status]
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="gem-chat", messages=MESSAGES)
    assert resp.infrai["vendor"] == "backup" and resp.infrai["failovers"] == 1
    assert resp.choices[0].message.content == "Echo: hello there"
    chunks = list(client.chat.completions.create(model="gem-chat", messages=MESSAGES, stream=True))
    assert chunks[-1].infrai["vendor"] == "backup"
    assert_billed(
        resp.infrai["request_id"],
        model="gem-chat",
        vendor="backup",
        usage=Usage(input_tokens=2, output_tokens=3),
    )


def test_a_stream_that_ends_before_any_event_fails_over(issue_key, client_for, gemini):
    gemini.cut_after = 0
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="gem-chat", messages=MESSAGES, stream=True
        )
    )
    assert chunks[-1].infrai["vendor"] == "backup"


def test_a_bad_request_is_a_400_without_failover(issue_key, client_for, gemini, fakes):
    gemini.fail_statuses = [400]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="gem-chat", messages=MESSAGES)
    assert info.value.body["code"] == "vendor_rejected_request"
    assert "INVALID_ARGUMENT" in info.value.body["message"]
    assert fakes["backup"].requests == []


@pytest.mark.parametrize(
    ("status", "quota", "kind", "words"),
    [
        (429, False, errors.VendorRateLimited, "rate limit reached; retry in 7s"),
        (429, True, errors.VendorRateLimited, "daily quota exhausted; retry in 7s"),
        (500, False, errors.VendorServerError, "INTERNAL"),
        (503, False, errors.VendorServerError, "UNAVAILABLE"),
        (403, False, errors.VendorMisconfigured, "PERMISSION_DENIED"),
        (404, False, errors.VendorMisconfigured, "NOT_FOUND"),
        (400, False, errors.VendorRejected, "INVALID_ARGUMENT"),
    ],
)
def test_each_gemini_error_is_its_vendor_error_class(gemini, status, quota, kind, words):
    gemini.fail_statuses, gemini.quota_exhausted = [status], quota
    with pytest.raises(errors.VendorError) as info:
        _run(GeminiAdapter().chat(_target(gemini), {"messages": MESSAGES}))
    assert type(info.value) is kind and info.value.retryable is (kind is not errors.VendorRejected)
    assert words in info.value.message and info.value.status == status


def test_a_refused_key_is_misconfiguration_never_echoing_the_key(gemini):
    with pytest.raises(errors.VendorMisconfigured) as info:
        _run(GeminiAdapter().chat(_target(gemini, api_key="sk-secret-9"), {"messages": MESSAGES}))
    assert "API key not valid" in info.value.message and "sk-secret-9" not in info.value.message


def test_images_audio_and_moderations_are_refused(gemini):
    adapter = adapter_for("gemini")
    target = _target(gemini)
    for call in (
        adapter.images(target, {"prompt": "a cat"}),
        adapter.moderate(target, {"input": "hi"}),
        adapter.speech_stream(target, {"input": "hi"}),
        adapter.transcribe(target, {}, ("a.wav", b"", "audio/wav")),
    ):
        with pytest.raises(errors.VendorRejected):
            _run(call)
    assert gemini.requests == []


# --- embeddings ---------------------------------------------------------------------------
def test_embeddings_are_batch_embed_contents_counted_by_the_gateway(issue_key, client_for, gemini):
    texts = ["first text here", "second"]
    resp = client_for(issue_key()).embeddings.create(model="gem-embed", input=texts, dimensions=4)
    assert [d.embedding for d in resp.data] == [
        pytest.approx(fake_embedding(t, 4), rel=1e-6) for t in texts
    ]
    sent = gemini.requests[-1]
    assert sent["path"] == "/v1beta/models/gemini-embed-fake:batchEmbedContents"
    assert sent["body"]["requests"][1] == {
        "model": "models/gemini-embed-fake",
        "content": {"parts": [{"text": "second"}]},
        "outputDimensionality": 4,
    }
    # Gemini reports no usage for embeddings: our own count is billed, and flagged so.
    counted = sum(tokens.count_text(t) for t in texts)
    assert resp.usage.prompt_tokens == counted
    assert resp.model_extra["infrai"]["usage_estimated"] is True
    assert_billed(
        resp.model_extra["infrai"]["request_id"],
        model="gem-embed",
        vendor="gem",
        usage=Usage(input_tokens=counted),
    )


# --- the probe ----------------------------------------------------------------------------
def test_the_probe_lists_every_page_of_models_without_their_prefix(gemini):
    gemini.models = ["gemini-fake", "gemini-embed-fake", "gemini-pro-fake"]
    gemini.max_page_size = 2
    try:
        result = vendor_probe(vendor=Vendor.objects.get(name="gem"))
    finally:
        gemini.models = ["gemini-fake", "gemini-embed-fake"]
    assert result.error == ""
    assert result.models == ("gemini-embed-fake", "gemini-fake", "gemini-pro-fake")
    assert [r["query"] for r in gemini.requests] == [
        {"pageSize": "1000"},
        {"pageSize": "1000", "pageToken": "2"},
    ]
    assert {r["key"] for r in gemini.requests} == {gemini.api_key}
    assert Vendor.objects.get(name="gem").verified_models == list(result.models)


def test_a_stream_cut_after_it_started_ends_with_an_error_and_bills_what_was_delivered(
    issue_key, client_for, gemini, fakes
):
    """Gemini drops the connection mid-answer: no failover once bytes reached the client, an
    error event ends the stream, the call is billed for what was delivered (exactly once), no
    hold stays open and the audit finds nothing."""
    from billing.audit import audit_findings
    from tests.live import wait_for

    gemini.cut_after = 2
    stream = client_for(issue_key()).chat.completions.create(
        model="gem-chat",
        messages=[{"role": "user", "content": "one two three four five"}],
        stream=True,
    )
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received += [c.delta.content or "" for c in chunk.choices]
    assert "".join(received).startswith("Echo:") and fakes["backup"].requests == []
    entry = wait_for(lambda: LedgerEntry.objects.filter(amount_nanos__lt=0).first())
    assert LedgerEntry.objects.filter(request_id=entry.request_id).count() == 1
    wait_for(lambda: not Hold.objects.filter(status=HoldStatus.OPEN).exists() or None)
    assert audit_findings().money == []
