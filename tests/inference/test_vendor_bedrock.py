"""AWS Bedrock end to end: the official SDK → live app → the Bedrock adapter → the fake Bedrock
(``tests/fakes/bedrock.py``, itself checked with boto3 by
``tests/vendors/test_bedrock_fidelity.py``), which verifies every SigV4 signature.

The catalog (:func:`bedrock_catalog`) puts ``br-claude`` on the fake's cross-region inference
profile (priority 10) with the OpenAI-compatible fake ``backup`` behind it (priority 20), and
``br-embed`` on Titan Text Embeddings V2. Covered: chat (plain, streamed, tools and their
results, vision, JSON output), embeddings, each Bedrock error class and what the gateway does
with it (fail over, or refuse without failing over), guardrails, temporary credentials and API
keys, the probe, and the money: prompt (cache reads and writes included), cached and
completion tokens billed exactly on the ledger.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import openai
import pytest
import yaml

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import SEED_PATH, catalog_load
from catalog.models import Vendor
from catalog.services import vendor_probe
from catalog.vendor_wire import bedrock_control_url, bedrock_credentials
from inference.vendors import errors, http
from inference.vendors.base import VendorTarget
from inference.vendors.bedrock import BedrockAdapter
from inference.vendors.registry import adapter_for
from money.pricing import Usage
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.bedrock import (
    ACCESS_KEY_ID,
    API_KEY,
    GUARDRAIL_TEXT,
    REGION,
    SECRET_KEY,
    SESSION_TOKEN,
    TEMP_KEY_ID,
    FakeBedrock,
)
from tests.fakes.vendors import FakeVendor, png_bytes
from tests.inference.conftest import EMBED_PRICE, assert_billed

CLAUDE = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
TITAN = "amazon.titan-embed-text-v2:0"
MESSAGES = [{"role": "user", "content": "hello there"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
KEY_ENV = "FAKE_BEDROCK_CREDENTIALS"
CREDENTIALS = f"{ACCESS_KEY_ID}:{SECRET_KEY}"
T = TypeVar("T")


@pytest.fixture(scope="session")
def _bedrock_server() -> Iterator[FakeBedrock]:
    with FakeBedrock() as server:
        yield server


@pytest.fixture
def bedrock(_bedrock_server: FakeBedrock) -> FakeBedrock:
    """The fake Bedrock, its behaviours reset."""
    _bedrock_server.reset()
    return _bedrock_server


@pytest.fixture
def bedrock_catalog(
    bedrock: FakeBedrock,
    fakes: dict[str, FakeVendor],
    transactional_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> FakeBedrock:
    """The catalog with only ``bedrock-use1`` (the fake, adapter ``bedrock``, region us-east-1,
    SigV4 credentials in ``FAKE_BEDROCK_CREDENTIALS``) and ``backup`` (an OpenAI-compatible
    FakeVendor) routable:

    - ``br-claude`` (chat, vision, tools, json): bedrock-use1 ``us.anthropic…:0`` (10),
      backup (20);
    - ``br-embed`` (embeddings): bedrock-use1 ``amazon.titan-embed-text-v2:0``.

    ``bedrock-use1`` has the seed's ``bedrock`` vendor rules (what Converse has no field for).
    """
    monkeypatch.setenv(KEY_ENV, CREDENTIALS)
    seed = yaml.safe_load(SEED_PATH.read_text())
    rules = next(v for v in seed["vendors"] if v["name"] == "bedrock")["parameter_rules"]
    vendors = [
        {
            **catalog_vendor(
                "bedrock-use1",
                base_url=bedrock.url,
                verified_models=[CLAUDE, TITAN],
                display_name="AWS Bedrock (us-east-1)",
                adapter_kind="bedrock",
                credentials_env=KEY_ENV,
                region=REGION,
            ),
            "parameter_rules": rules,
        },
        catalog_vendor("backup", base_url=fakes["backup"].url, verified_models=["up-large"]),
    ]
    models = [
        catalog_model(
            "br-claude",
            quality_tier=9,
            capabilities=["chat", "vision", "tools", "json_mode"],
            offerings=[
                offering("bedrock-use1", CLAUDE, PRICE, priority=10),
                offering("backup", "up-large", PRICE, priority=20),
            ],
        ),
        catalog_model(
            "br-embed",
            quality_tier=6,
            capabilities=["embeddings"],
            offerings=[offering("bedrock-use1", TITAN, EMBED_PRICE, priority=10)],
        ),
    ]
    Vendor.objects.exclude(name__in=["bedrock-use1", "backup"]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})
    return bedrock


pytestmark = pytest.mark.usefixtures("bedrock_catalog")


def _no_open_holds() -> bool:
    return not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def _converse(bedrock: FakeBedrock) -> dict[str, Any]:
    """The body of the last Converse/ConverseStream request the fake accepted."""
    return bedrock.requests[-1]["body"]


# --- chat ---------------------------------------------------------------------------------
def test_plain_chat_is_signed_converse_and_bills_cache_reads_and_writes_exactly(
    issue_key, client_for, bedrock, fakes
):
    bedrock.cache_read_tokens, bedrock.cache_write_tokens = 2, 1
    resp = client_for(issue_key()).chat.completions.create(
        model="br-claude",
        messages=[{"role": "system", "content": "be brief"}, *MESSAGES],
        max_tokens=40,
        temperature=0.3,
        top_p=0.9,
        stop=["END"],
    )
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.infrai["vendor"] == "bedrock-use1" and fakes["backup"].requests == []
    sent = bedrock.requests[-1]
    assert sent["operation"] == "Converse" and sent["auth"] == "sigv4"
    assert sent["path"] == "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse"
    assert sent["model"] == CLAUDE
    assert sent["body"]["system"] == [{"text": "be brief"}]
    assert sent["body"]["messages"] == [{"role": "user", "content": [{"text": "hello there"}]}]
    assert sent["body"]["inferenceConfig"] == {
        "maxTokens": 40,
        "temperature": 0.3,
        "topP": 0.9,
        "stopSequences": ["END"],
    }
    # 4 fresh prompt tokens (system and user words) + 2 cache reads + 1 cache write
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (7, 3)
    assert resp.usage.prompt_tokens_details.cached_tokens == 2
    assert resp.usage.prompt_tokens_details.cache_write_tokens == 1
    usage = Usage(input_tokens=7, cached_input_tokens=2, cache_write_5m_tokens=1, output_tokens=3)
    cost = assert_billed(
        resp.infrai["request_id"], model="br-claude", vendor="bedrock-use1", usage=usage
    )
    # $1 / $0.50 / $2 per million, a 5-minute cache write at the default 1.25 × $1: 4 uncached
    # prompt tokens, 2 cached, 1 written, 3 completion tokens.
    assert cost == 4 * 1_000 + 2 * 500 + 1 * 1_250 + 3 * 2_000 == resp.infrai["cost_nanos"]


def test_stream_decodes_the_event_stream_and_bills_its_metadata_usage(
    issue_key, client_for, bedrock
):
    bedrock.cache_read_tokens = 1
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="br-claude",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert bedrock.requests[-1]["operation"] == "ConverseStream"
    assert bedrock.requests[-1]["path"].endswith("%3A0/converse-stream")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    last = chunks[-1]
    assert last.choices == [] and last.usage.prompt_tokens == 3
    assert last.usage.prompt_tokens_details.cached_tokens == 1
    assert last.infrai["vendor"] == "bedrock-use1"
    assert (
        assert_billed(
            last.infrai["request_id"],
            model="br-claude",
            vendor="bedrock-use1",
            usage=Usage(input_tokens=3, cached_input_tokens=1, output_tokens=3),
        )
        == 2 * 1_000 + 1 * 500 + 3 * 2_000
    )


def test_tools_plain_streamed_and_the_tool_result_round_trip(issue_key, client_for, bedrock):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model="br-claude", messages=MESSAGES, tools=TOOLS, tool_choice="required"
    )
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and resp.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id == "tooluse_fake0"
    assert _converse(bedrock)["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "inputSchema": {"json": TOOLS[0]["function"]["parameters"]},
                }
            }
        ],
        "toolChoice": {"any": {}},
    }
    arguments, names, reasons = "", [], []
    for chunk in client.chat.completions.create(
        model="br-claude", messages=MESSAGES, tools=TOOLS, stream=True
    ):
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for delta in choice.delta.tool_calls or []:
                names.append(delta.function.name)
                arguments += delta.function.arguments or ""
    assert "get_weather" in names and reasons[-1] == "tool_calls"
    assert json.loads(arguments) == {"city": "Paris"}
    followup = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny and warm"},
    ]
    resp = client.chat.completions.create(model="br-claude", messages=followup, tools=TOOLS)
    assert resp.choices[0].message.content == "Echo: sunny and warm"
    sent = _converse(bedrock)["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"toolUse": {"toolUseId": call.id, "name": "get_weather", "input": {"city": "Paris"}}}
        ],
    }
    assert sent[2]["content"] == [
        {"toolResult": {"toolUseId": call.id, "content": [{"text": "sunny and warm"}]}}
    ]


def test_vision_sends_data_urls_and_fetched_image_urls_as_bytes(
    issue_key, client_for, bedrock, fakes, settings
):
    client = client_for(issue_key())
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    resp = client.chat.completions.create(
        model="br-claude",
        messages=[{"role": "user", "content": [{"type": "text", "text": "what is it"}, image]}],
    )
    assert resp.choices[0].message.content == "Echo: what is it"
    assert _converse(bedrock)["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}
    }
    settings.INFRAI_FETCH_PRIVATE_URLS = True  # the image server is on 127.0.0.1
    remote = {"type": "image_url", "image_url": {"url": fakes["backup"].url + "/files/cat.png"}}
    client.chat.completions.create(
        model="br-claude",
        messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, remote]}],
    )
    sent = _converse(bedrock)["messages"][0]["content"][1]["image"]
    assert sent["format"] == "png" and base64.b64decode(sent["source"]["bytes"]) == png_bytes("cat")


def test_an_image_url_to_a_private_address_is_refused_before_any_vendor_call(
    issue_key, client_for, bedrock, fakes
):
    calls = len(bedrock.requests)
    for url in ("http://169.254.169.254/latest/meta-data/", fakes["backup"].url + "/files/x.png"):
        remote = {"type": "image_url", "image_url": {"url": url}}
        with pytest.raises(openai.BadRequestError) as info:
            client_for(issue_key()).chat.completions.create(
                model="br-claude",
                messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, remote]}],
            )
        assert info.value.body["code"] == "invalid_image_url"
        assert "not public" in info.value.body["message"] and url not in info.value.body["message"]
    assert len(bedrock.requests) == calls and fakes["backup"].requests == []


def test_json_output_is_converse_output_config(issue_key, client_for, bedrock):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model="br-claude", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    client.chat.completions.create(
        model="br-claude",
        messages=MESSAGES,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
    )
    assert _converse(bedrock)["outputConfig"] == {
        "textFormat": {
            "type": "json_schema",
            "structure": {"jsonSchema": {"schema": json.dumps(schema), "name": "answer"}},
        }
    }


def test_embeddings_are_one_titan_invoke_per_input_with_usage_summed(
    issue_key, client_for, bedrock
):
    resp = client_for(issue_key()).embeddings.create(
        model="br-embed", input=["alpha beta", "gamma"], dimensions=256
    )
    assert [len(d.embedding) for d in resp.data] == [256, 256]
    assert resp.data[0].embedding != resp.data[1].embedding and resp.usage.prompt_tokens == 3
    invokes = [r for r in bedrock.requests if r["operation"] == "InvokeModel"]
    assert [r["body"] for r in invokes] == [
        {"inputText": "alpha beta", "dimensions": 256},
        {"inputText": "gamma", "dimensions": 256},
    ]
    assert invokes[0]["path"] == "/model/amazon.titan-embed-text-v2%3A0/invoke"
    infrai = resp.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"], model="br-embed", vendor="bedrock-use1", usage=Usage(input_tokens=3)
    )
    assert cost == 3 * 20 == infrai["cost_nanos"]  # $0.02 per million tokens


# --- errors and failover ------------------------------------------------------------------
@pytest.mark.parametrize(
    "failure",
    [
        "ThrottlingException",
        "ServiceQuotaExceededException",
        "ModelTimeoutException",
        "InternalServerException",
        "ServiceUnavailableException",
        "ModelErrorException",
        "AccessDeniedException",
        "ResourceNotFoundException",
    ],
)
def test_retryable_bedrock_errors_fail_over_to_the_openai_compatible_vendor(
    failure, issue_key, client_for, bedrock, fakes
):
    bedrock.fail_statuses = [failure]
    resp = client_for(issue_key()).chat.completions.create(model="br-claude", messages=MESSAGES)
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.infrai["vendor"] == "backup" and resp.infrai["failovers"] == 1
    assert fakes["backup"].requests[-1]["model"] == "up-large"
    assert_billed(
        resp.infrai["request_id"],
        model="br-claude",
        vendor="backup",
        usage=Usage(input_tokens=2, output_tokens=3),
    )


def test_a_bad_signature_fails_over(issue_key, client_for, bedrock, fakes, monkeypatch):
    monkeypatch.setenv(KEY_ENV, f"{ACCESS_KEY_ID}:rotated-secret")
    resp = client_for(issue_key()).chat.completions.create(model="br-claude", messages=MESSAGES)
    assert resp.infrai["vendor"] == "backup"
    assert bedrock.requests == []  # the fake refused it before reading it as a request


def test_streamed_failover_before_the_first_byte(issue_key, client_for, bedrock):
    bedrock.fail_statuses = [429]
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="br-claude", messages=MESSAGES, stream=True
        )
    )
    assert chunks[-1].infrai["vendor"] == "backup"


def test_every_vendor_failing_is_a_502_that_charges_nothing(issue_key, client_for, bedrock, fakes):
    bedrock.fail_statuses = [500]
    fakes["backup"].fail_statuses = [502]
    with pytest.raises(openai.InternalServerError) as info:
        client_for(issue_key()).chat.completions.create(model="br-claude", messages=MESSAGES)
    assert info.value.status_code == 502
    assert not LedgerEntry.objects.filter(kind="usage").exists() and _no_open_holds()


def test_a_validation_error_is_a_400_without_failover(issue_key, client_for, bedrock, fakes):
    bedrock.fail_statuses = [400]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="br-claude", messages=MESSAGES)
    assert info.value.body["code"] == "vendor_rejected_request"
    assert fakes["backup"].requests == [] and _no_open_holds()


def test_a_context_overflow_is_context_length_exceeded(issue_key, client_for, bedrock, fakes):
    bedrock.fail_statuses, bedrock.fail_message = [400], "Input is too long for requested model."
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="br-claude", messages=MESSAGES)
    assert info.value.body["code"] == "context_length_exceeded"
    assert fakes["backup"].requests == []


def test_a_guardrail_intervention_is_finish_reason_content_filter_and_billed(
    issue_key, client_for, bedrock
):
    bedrock.guardrail = True
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="br-claude", messages=MESSAGES)
    assert resp.choices[0].finish_reason == "content_filter"
    assert resp.choices[0].message.content == GUARDRAIL_TEXT
    words = len(GUARDRAIL_TEXT.split())
    assert_billed(
        resp.infrai["request_id"],
        model="br-claude",
        vendor="bedrock-use1",
        usage=Usage(input_tokens=2, output_tokens=words),
    )
    chunks = list(client.chat.completions.create(model="br-claude", messages=MESSAGES, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"


def test_a_stream_exception_after_the_first_byte_ends_the_stream_with_an_error(
    issue_key, client_for, bedrock
):
    bedrock.stream_fail = "modelStreamErrorException"
    with pytest.raises(openai.APIError):
        for _chunk in client_for(issue_key()).chat.completions.create(
            model="br-claude", messages=MESSAGES, stream=True
        ):
            pass
    assert _no_open_holds()


# --- the adapter on its own (against the fake, without the gateway) ------------------------
def _target(bedrock: FakeBedrock, **more: Any) -> VendorTarget:
    target = VendorTarget(
        vendor="bedrock-use1",
        base_url=bedrock.url,
        upstream_model=CLAUDE,
        api_key=CREDENTIALS,
        region=REGION,
    )
    return dataclasses.replace(target, **more)


def _run(call: Awaitable[T]) -> T:
    """``call`` on a fresh event loop, closing that loop's HTTP session after it."""

    async def run() -> T:
        try:
            return await call
        finally:
            await http.close()

    return asyncio.run(run())


def _chat_error(target: VendorTarget, payload: dict[str, Any] | None = None) -> errors.VendorError:
    with pytest.raises(errors.VendorError) as info:
        _run(BedrockAdapter().chat(target, payload or {"messages": MESSAGES}))
    return info.value


@pytest.mark.parametrize(
    ("failure", "kind", "words"),
    [
        ("ThrottlingException", errors.VendorRateLimited, "rate limited"),
        ("ServiceQuotaExceededException", errors.VendorRateLimited, "quota"),
        ("ModelNotReadyException", errors.VendorLoading, "ModelNotReadyException"),
        ("ModelTimeoutException", errors.VendorServerError, "408"),
        ("AccessDeniedException", errors.VendorMisconfigured, "403"),
        ("ResourceNotFoundException", errors.VendorMisconfigured, "404"),
        ("ValidationException", errors.VendorRejected, "400"),
    ],
)
def test_the_adapter_maps_each_bedrock_exception(bedrock, failure, kind, words):
    bedrock.fail_statuses = [failure]
    error = _chat_error(_target(bedrock))
    assert type(error) is kind and words in error.message
    assert SECRET_KEY not in error.message and "hello there" not in error.message


@pytest.mark.parametrize(
    ("exception", "kind"),
    [
        ("throttlingException", errors.VendorRateLimited),
        ("validationException", errors.VendorRejected),
        ("internalServerException", errors.VendorServerError),
        ("serviceUnavailableException", errors.VendorServerError),
    ],
)
def test_the_adapter_maps_stream_exception_events(bedrock, exception, kind):
    bedrock.stream_fail = exception

    async def drain() -> list[dict[str, Any]]:
        received = []
        async for chunk in BedrockAdapter().stream_chat(_target(bedrock), {"messages": MESSAGES}):
            received.append(chunk)
        return received

    with pytest.raises(errors.VendorError) as info:
        _run(drain())
    assert type(info.value) is kind


def test_temporary_credentials_and_an_api_key_are_accepted(bedrock):
    adapter = adapter_for("bedrock")
    assert isinstance(adapter, BedrockAdapter)
    temporary = _target(bedrock, api_key=f"{TEMP_KEY_ID}:{SECRET_KEY}:{SESSION_TOKEN}")
    out = _run(adapter.chat(temporary, {"messages": MESSAGES}))
    assert out["choices"][0]["message"]["content"] == "Echo: hello there"
    assert bedrock.requests[-1]["auth"] == "sigv4"
    out = _run(adapter.chat(_target(bedrock, api_key=API_KEY), {"messages": MESSAGES}))
    assert bedrock.requests[-1]["auth"] == "bearer"
    missing_token = _chat_error(_target(bedrock, api_key=f"{TEMP_KEY_ID}:{SECRET_KEY}"))
    assert isinstance(missing_token, errors.VendorMisconfigured) and missing_token.status == 403


def test_an_arn_model_id_is_one_percent_encoded_path_label(bedrock):
    arn = f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{CLAUDE}"
    _run(BedrockAdapter().chat(_target(bedrock, upstream_model=arn), {"messages": MESSAGES}))
    assert bedrock.requests[-1]["model"] == arn
    assert bedrock.requests[-1]["path"].startswith(
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus."
    )


def test_top_k_goes_to_anthropic_models_only_and_n_is_refused(bedrock):
    payload = {"messages": MESSAGES, "top_k": 5}
    _run(BedrockAdapter().chat(_target(bedrock), payload))
    assert _converse(bedrock)["additionalModelRequestFields"] == {"top_k": 5}
    llama = "us.meta.llama3-3-70b-instruct-v1:0"
    _run(BedrockAdapter().chat(_target(bedrock, upstream_model=llama), payload))
    assert "additionalModelRequestFields" not in _converse(bedrock)
    refused = _chat_error(_target(bedrock), {"messages": MESSAGES, "n": 2})
    assert isinstance(refused, errors.VendorRejected) and refused.param == "n"


def test_the_adapter_refuses_images_and_moderations(bedrock):
    with pytest.raises(errors.VendorRejected):
        _run(BedrockAdapter().images(_target(bedrock), {"prompt": "x"}))
    with pytest.raises(errors.VendorRejected):
        _run(BedrockAdapter().moderate(_target(bedrock), {"input": "x"}))
    assert bedrock.requests == []


# --- credentials and the probe --------------------------------------------------------------
def test_the_credentials_format():
    keys = bedrock_credentials(f"{ACCESS_KEY_ID}:{SECRET_KEY}")
    assert keys is not None and (keys.access_key, keys.secret_key, keys.token) == (
        ACCESS_KEY_ID,
        SECRET_KEY,
        None,
    )
    temporary = bedrock_credentials(f"{TEMP_KEY_ID}:{SECRET_KEY}:{SESSION_TOKEN}")
    assert temporary is not None and temporary.token == SESSION_TOKEN
    assert bedrock_credentials(API_KEY) is None  # no ':': a Bedrock API key
    for bad in ("", "a::c", "a:b:c:d"):
        with pytest.raises(ValueError):
            bedrock_credentials(bad)


def test_the_control_plane_host_comes_from_a_runtime_base_url():
    runtime = "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert bedrock_control_url(runtime) == "https://bedrock.eu-west-3.amazonaws.com"
    fips = "https://bedrock-runtime-fips.us-east-1.amazonaws.com/"
    assert bedrock_control_url(fips) == "https://bedrock-fips.us-east-1.amazonaws.com"
    assert bedrock_control_url("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"


def test_the_probe_lists_foundation_models_and_every_inference_profile(bedrock):
    vendor = Vendor.objects.get(name="bedrock-use1")
    result = vendor_probe(vendor=vendor)
    assert result.error == ""
    assert result.models == tuple(sorted(bedrock.foundation_models + bedrock.inference_profiles))
    listed = [r["operation"] for r in bedrock.requests]
    # one page per profile: the probe followed nextToken, every call signed
    assert listed == ["ListFoundationModels"] + ["ListInferenceProfiles"] * 2
    assert {r["auth"] for r in bedrock.requests} == {"sigv4"}
    vendor.refresh_from_db()
    assert CLAUDE in vendor.verified_models and TITAN in vendor.verified_models


def test_a_probe_with_a_wrong_secret_verifies_nothing_new(bedrock, monkeypatch):
    monkeypatch.setenv(KEY_ENV, f"{ACCESS_KEY_ID}:wrong-secret")
    vendor = Vendor.objects.get(name="bedrock-use1")
    result = vendor_probe(vendor=vendor)
    assert result.models is None and "403" in result.error and "wrong-secret" not in result.error


def test_what_converse_has_no_field_for_is_refused_or_reported_never_dropped(
    issue_key, api_base, bedrock, fakes
):
    """The seed's Bedrock rules: ``logprobs`` goes to a vendor that has it (never to Bedrock),
    a pin to Bedrock with it is a 400 naming it, and ``seed`` is served but reported ignored."""
    client = openai.OpenAI(base_url=api_base, api_key=issue_key(), max_retries=0)
    calls = len(bedrock.requests)
    resp = client.chat.completions.create(model="br-claude", messages=MESSAGES, logprobs=True)
    assert resp.infrai["vendor"] == "backup" and len(bedrock.requests) == calls
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="bedrock-use1/br-claude", messages=MESSAGES, logprobs=True
        )
    assert info.value.body["param"] == "logprobs" and len(bedrock.requests) == calls
    raw = client.chat.completions.with_raw_response.create(
        model="br-claude", messages=MESSAGES, seed=7
    )
    assert raw.parse().infrai["vendor"] == "bedrock-use1"
    assert raw.headers["x-infrai-ignored-params"] == "seed"
