"""Azure OpenAI end to end: the official SDK → live app → the Azure adapter → the fake Azure
resource (``tests/fakes/azure.py``, itself checked by ``tests/vendors/test_azure_fidelity.py``).

The catalog (:func:`azure_catalog`) puts ``az-gpt`` on the fake resource's ``chat-prod``
deployment (priority 10) with the OpenAI-compatible fake ``backup`` behind it (priority 20), and
``az-embed`` / ``az-image`` on its ``embed-prod`` / ``images-prod`` deployments. Covered: chat
(plain, streamed, tools, vision, JSON output), embeddings, images, each Azure error class and
what the gateway does with it (fail over, or refuse without failing over), the content filter
(refusal and cut answer), the probe, and the money: prompt, cached and completion tokens (and
images) billed exactly on the ledger.
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

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import catalog_load
from catalog.models import Vendor
from catalog.services import vendor_probe
from inference.vendors import errors, http
from inference.vendors.azure import API_VERSION, AzureOpenAIAdapter
from inference.vendors.base import VendorTarget
from inference.vendors.registry import adapter_for
from money.pricing import Usage
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.azure import API_KEY, FakeAzureOpenAI
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import EMBED_PRICE, IMAGE_PRICE, assert_billed

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
KEY_ENV = "FAKE_AZURE_OPENAI_KEY"
T = TypeVar("T")


@pytest.fixture(scope="session")
def _azure_server() -> Iterator[FakeAzureOpenAI]:
    with FakeAzureOpenAI() as server:
        yield server


@pytest.fixture
def azure(_azure_server: FakeAzureOpenAI) -> FakeAzureOpenAI:
    """The fake Azure resource, its behaviours reset."""
    _azure_server.reset()
    return _azure_server


@pytest.fixture
def azure_catalog(
    azure: FakeAzureOpenAI,
    fakes: dict[str, FakeVendor],
    transactional_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> FakeAzureOpenAI:
    """The catalog with only ``azure-east`` (the fake resource, adapter ``azure``, api-version
    pinned) and ``backup`` (an OpenAI-compatible FakeVendor) routable:

    - ``az-gpt`` (chat, vision, tools, json): azure-east ``chat-prod`` (10), backup (20);
    - ``az-embed`` (embeddings): azure-east ``embed-prod``;
    - ``az-image`` (images, $0.04 per 1024x1024 standard image): azure-east ``images-prod``.
    """
    monkeypatch.setenv(KEY_ENV, API_KEY)
    azure_vendor = catalog_vendor(
        "azure-east",
        base_url=azure.url,
        verified_models=["chat-prod", "embed-prod", "images-prod"],
        display_name="Azure OpenAI (East US)",
        adapter_kind="azure",
        credentials_env=KEY_ENV,
        region="eastus",
    )
    vendors = [
        {**azure_vendor, "api_version": API_VERSION},
        catalog_vendor("backup", base_url=fakes["backup"].url, verified_models=["up-large"]),
    ]
    models = [
        catalog_model(
            "az-gpt",
            quality_tier=9,
            capabilities=["chat", "vision", "tools", "json_mode"],
            offerings=[
                offering("azure-east", "chat-prod", PRICE, priority=10),
                offering("backup", "up-large", PRICE, priority=20),
            ],
        ),
        catalog_model(
            "az-embed",
            quality_tier=6,
            capabilities=["embeddings"],
            offerings=[offering("azure-east", "embed-prod", EMBED_PRICE, priority=10)],
        ),
        catalog_model(
            "az-image",
            quality_tier=7,
            capabilities=["images"],
            offerings=[offering("azure-east", "images-prod", IMAGE_PRICE, priority=10)],
        ),
    ]
    Vendor.objects.exclude(name__in=["azure-east", "backup"]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})
    return azure


pytestmark = pytest.mark.usefixtures("azure_catalog")


def _no_open_holds() -> bool:
    return not Hold.objects.filter(status=HoldStatus.OPEN).exists()


# --- chat ---------------------------------------------------------------------------------
def test_plain_chat_reaches_the_deployment_and_bills_cached_tokens_exactly(
    issue_key, client_for, azure, fakes
):
    azure.cached_tokens = 1
    resp = client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.infrai["vendor"] == "azure-east" and resp.infrai["region"] == "eastus"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (2, 3)
    call = azure.calls[-1]
    assert call["path"] == "/openai/deployments/chat-prod/chat/completions"
    assert call["api_version"] == API_VERSION
    assert call["api_key"] == API_KEY and call["authorization"] is None
    assert fakes["backup"].requests == []
    usage = Usage(input_tokens=2, cached_input_tokens=1, output_tokens=3)
    cost = assert_billed(
        resp.infrai["request_id"], model="az-gpt", vendor="azure-east", usage=usage
    )
    # $1 / $0.50 / $2 per million: 1 fresh prompt token, 1 cached, 3 completion tokens.
    assert cost == 1 * 1_000 + 1 * 500 + 3 * 2_000 == resp.infrai["cost_nanos"]


def test_stream_skips_the_prompt_filter_chunk_and_bills_azures_usage(issue_key, client_for):
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="az-gpt",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    # Azure's first chunk (choices [], prompt_filter_results only) is not relayed.
    assert all(c.choices for c in chunks[:-1]) and chunks[0].id == chunks[-1].id != ""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 3
    assert last.infrai["vendor"] == "azure-east"
    cost = assert_billed(
        last.infrai["request_id"],
        model="az-gpt",
        vendor="azure-east",
        usage=Usage(input_tokens=2, output_tokens=3),
    )
    assert cost == 2 * 1_000 + 3 * 2_000 == last.infrai["cost_nanos"]


def test_tools_plain_and_streamed(issue_key, client_for, azure):
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="az-gpt", messages=MESSAGES, tools=TOOLS)
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and resp.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert azure.requests[-1]["tools"] == TOOLS
    arguments, reasons = "", []
    for chunk in client.chat.completions.create(
        model="az-gpt", messages=MESSAGES, tools=TOOLS, stream=True
    ):
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            for delta in choice.delta.tool_calls or []:
                arguments += delta.function.arguments or ""
    assert json.loads(arguments) == {"city": "Paris"} and reasons[-1] == "tool_calls"


def test_vision_and_json_output(issue_key, client_for, azure):
    client = client_for(issue_key())
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    resp = client.chat.completions.create(
        model="az-gpt",
        messages=[{"role": "user", "content": [{"type": "text", "text": "what is it"}, image]}],
    )
    assert resp.choices[0].message.content == "Echo: what is it"
    assert azure.requests[-1]["messages"][0]["content"][1]["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )
    resp = client.chat.completions.create(
        model="az-gpt", messages=MESSAGES, response_format={"type": "json_object"}
    )
    assert json.loads(resp.choices[0].message.content) == {"ok": True}
    assert azure.requests[-1]["response_format"] == {"type": "json_object"}


def test_embeddings_are_served_by_the_deployment_and_billed(issue_key, client_for, azure):
    resp = client_for(issue_key()).embeddings.create(model="az-embed", input=["alpha beta", "g"])
    assert [len(d.embedding) for d in resp.data] == [8, 8] and resp.usage.prompt_tokens == 3
    assert azure.calls[-1]["path"] == "/openai/deployments/embed-prod/embeddings"
    infrai = resp.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"], model="az-embed", vendor="azure-east", usage=Usage(input_tokens=3)
    )
    assert cost == 3 * 20 == infrai["cost_nanos"]  # $0.02 per million tokens


def test_images_are_served_by_the_deployment_and_billed_per_image(issue_key, client_for, azure):
    resp = client_for(issue_key()).images.generate(
        model="az-image", prompt="a red panda", size="1024x1024", response_format="b64_json"
    )
    assert base64.b64decode(resp.data[0].b64_json).startswith(b"\x89PNG")
    assert azure.calls[-1]["path"] == "/openai/deployments/images-prod/images/generations"
    infrai = resp.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"],
        model="az-image",
        vendor="azure-east",
        usage=Usage(images={"1024x1024/standard": 1}),
    )
    assert cost == 40_000_000 == infrai["cost_nanos"]  # $0.04


# --- errors and failover ------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 500, 503, 401, 403, 404])
def test_retryable_azure_errors_fail_over_to_the_openai_compatible_vendor(
    status, issue_key, client_for, azure, fakes
):
    azure.fail_statuses = [status]
    resp = client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.infrai["vendor"] == "backup" and resp.infrai["failovers"] == 1
    assert fakes["backup"].requests[-1]["model"] == "up-large"
    assert_billed(
        resp.infrai["request_id"],
        model="az-gpt",
        vendor="backup",
        usage=Usage(input_tokens=2, output_tokens=3),
    )


def test_a_wrong_key_and_a_missing_deployment_fail_over(issue_key, client_for, azure):
    azure.api_key = "rotated-key"  # ours no longer works: Azure's 401
    try:
        resp = client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    finally:
        azure.api_key = API_KEY
    assert resp.infrai["vendor"] == "backup"
    azure.deployments.pop("chat-prod")  # deleted on Azure: 404 DeploymentNotFound
    try:
        resp = client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    finally:
        azure.deployments["chat-prod"] = "gpt-4o-2024-08-06"
    assert resp.infrai["vendor"] == "backup"


def test_streamed_failover_before_the_first_byte(issue_key, client_for, azure):
    azure.fail_statuses = [429]
    chunks = list(
        client_for(issue_key()).chat.completions.create(
            model="az-gpt", messages=MESSAGES, stream=True
        )
    )
    assert chunks[-1].infrai["vendor"] == "backup"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "Echo: hello there"
    )


def test_every_vendor_failing_is_a_502_that_charges_nothing(issue_key, client_for, azure, fakes):
    azure.fail_statuses = [500]
    fakes["backup"].fail_statuses = [502]
    with pytest.raises(openai.InternalServerError) as info:
        client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert info.value.status_code == 502
    assert not LedgerEntry.objects.filter(kind="usage").exists() and _no_open_holds()


def test_a_content_filter_refusal_is_a_400_content_filter_without_failover(
    issue_key, client_for, azure, fakes
):
    azure.content_filter = "prompt"
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert info.value.body["code"] == "content_filter"
    assert "violence (high)" in info.value.body["message"]
    assert "hello there" not in info.value.body["message"]  # never the prompt
    assert fakes["backup"].requests == []
    assert not LedgerEntry.objects.filter(kind="usage").exists() and _no_open_holds()


def test_a_bad_request_is_a_400_without_failover(issue_key, client_for, azure, fakes):
    azure.fail_statuses = [400]
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert info.value.body["code"] == "vendor_rejected_request"
    assert fakes["backup"].requests == [] and _no_open_holds()


def test_an_answer_cut_by_the_content_filter_keeps_its_finish_reason_and_is_billed(
    issue_key, client_for, azure
):
    azure.content_filter = "completion"
    client = client_for(issue_key())
    resp = client.chat.completions.create(model="az-gpt", messages=MESSAGES)
    assert resp.choices[0].finish_reason == "content_filter"
    assert resp.choices[0].message.content == "Echo:"
    assert_billed(
        resp.infrai["request_id"],
        model="az-gpt",
        vendor="azure-east",
        usage=Usage(input_tokens=2, output_tokens=1),
    )
    chunks = list(
        client.chat.completions.create(
            model="az-gpt", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"
    assert chunks[-1].usage.completion_tokens == 1


# --- the adapter's own errors (against the fake, without the gateway) ----------------------
def _target(azure: FakeAzureOpenAI, **more: Any) -> VendorTarget:
    target = VendorTarget(
        vendor="azure-east", base_url=azure.url, upstream_model="chat-prod", api_key=API_KEY
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


def _chat_error(target: VendorTarget) -> errors.VendorError:
    with pytest.raises(errors.VendorError) as info:
        _run(AzureOpenAIAdapter().chat(target, {"messages": MESSAGES}))
    return info.value


def test_the_adapter_says_rate_limit_or_quota_and_the_wait(azure):
    azure.fail_statuses = [429]
    limited = _chat_error(_target(azure))
    assert isinstance(limited, errors.VendorRateLimited)
    assert "rate limited (429, retry after 1.5 s)" in limited.message
    azure.fail_statuses, azure.quota = [429], True
    quota = _chat_error(_target(azure))
    assert isinstance(quota, errors.VendorRateLimited) and "quota exhausted" in quota.message


def test_the_adapter_maps_key_deployment_and_content_filter_errors(azure):
    denied = _chat_error(_target(azure, api_key="sk-stale-4821"))
    assert isinstance(denied, errors.VendorMisconfigured) and denied.status == 401
    assert "sk-stale-4821" not in denied.message  # never the key
    missing = _chat_error(_target(azure, upstream_model="gone"))
    assert isinstance(missing, errors.VendorMisconfigured) and "does not exist" in missing.message
    unknown = _chat_error(_target(azure, api_version="latest"))
    assert isinstance(unknown, errors.VendorMisconfigured) and unknown.status == 404
    azure.content_filter = "prompt"
    refused = _chat_error(_target(azure))
    assert isinstance(refused, errors.VendorRejected) and refused.code == "content_filter"
    assert refused.retryable is False


def test_the_adapter_sends_the_default_or_the_vendors_api_version(azure):
    adapter = adapter_for("azure")
    assert isinstance(adapter, AzureOpenAIAdapter)
    _run(adapter.chat(_target(azure), {"messages": MESSAGES}))
    assert azure.calls[-1]["api_version"] == API_VERSION == "2024-10-21"
    _run(adapter.chat(_target(azure, api_version="2025-01-01-preview"), {"messages": MESSAGES}))
    assert azure.calls[-1]["api_version"] == "2025-01-01-preview"


def test_the_adapter_refuses_moderations(azure):
    with pytest.raises(errors.VendorRejected):
        _run(AzureOpenAIAdapter().moderate(_target(azure), {"input": "x"}))
    assert azure.calls == []


# --- the probe ----------------------------------------------------------------------------
def test_the_probe_proves_the_key_and_verifies_the_offered_deployments(azure):
    vendor = Vendor.objects.get(name="azure-east")
    result = vendor_probe(vendor=vendor)
    assert result.error == "" and result.models == ("chat-prod", "embed-prod", "images-prod")
    assert azure.calls[-1]["path"] == "/openai/models"
    assert azure.calls[-1]["api_version"] == API_VERSION
    assert azure.calls[-1]["api_key"] == API_KEY
    vendor.refresh_from_db()
    assert vendor.verified_models == ["chat-prod", "embed-prod", "images-prod"]


def test_a_probe_with_a_refused_key_verifies_nothing_new(azure, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "not-the-key")
    vendor = Vendor.objects.get(name="azure-east")
    result = vendor_probe(vendor=vendor)
    assert result.models is None and "401" in result.error and "not-the-key" not in result.error
    vendor.refresh_from_db()
    assert vendor.last_probe_error == result.error
