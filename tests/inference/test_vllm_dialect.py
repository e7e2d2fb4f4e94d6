"""The gateway against a vLLM node: pointing a vendor at vLLM's OpenAI server is configuration.

A fake vLLM (:mod:`tests.fakes.vllm`, answering as vLLM 0.10 does) is the catalog vendor
``vllm-node`` of the model ``test-vllm``; the official SDK calls the live app. Adapter-level tests
cover what the gateway's own validation does not let through (vLLM-only fields, legacy errors).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from catalog import health
from catalog.documents import catalog_load
from catalog.models import Vendor
from catalog.services import vendor_probe
from catalog.types import CircuitState
from inference.vendors import errors
from inference.vendors.base import VendorTarget
from inference.vendors.openai_compat import OpenAICompatibleAdapter
from money.pricing import Usage
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.vllm import FakeVLLM, prompt_tokens
from tests.inference.conftest import assert_billed

SERVED = "meta-llama/Llama-3.1-8B-Instruct"
HELLO: list[Any] = [{"role": "user", "content": "hello there vllm"}]


@pytest.fixture(scope="session")
def _vllm_server() -> Iterator[FakeVLLM]:
    with FakeVLLM(served_model=SERVED, max_model_len=2048) as server:
        yield server


@pytest.fixture
def vllm(_vllm_server: FakeVLLM) -> FakeVLLM:
    _vllm_server.reset()
    return _vllm_server


def vllm_catalog(vllm: FakeVLLM, *, verified: bool) -> None:
    """``vllm-node`` (OpenAI adapter, the fake's URL) serving ``test-vllm``; nothing else."""
    vendor = catalog_vendor(
        "vllm-node",
        display_name="vLLM node",
        base_url=vllm.url,
        region="self-hosted",
        verified_models=[SERVED] if verified else None,
    )
    model = catalog_model(
        "test-vllm",
        capabilities=["chat", "json_mode"],
        context_window=32000,  # larger than the node's max_model_len: vLLM has the last word
        max_output_tokens=8192,
        offerings=[offering("vllm-node", SERVED, PRICE)],
    )
    Vendor.objects.exclude(name="vllm-node").update(enabled=False)
    catalog_load({"vendors": [vendor], "models": [model]})


@pytest.fixture
def on_vllm(vllm: FakeVLLM, transactional_db: None) -> FakeVLLM:
    """The catalog with ``test-vllm`` on the fake vLLM node, verified."""
    vllm_catalog(vllm, verified=True)
    return vllm


@pytest.fixture
def client(
    on_vllm: FakeVLLM,
    client_for: Callable[..., openai.OpenAI],
    issue_key: Callable[..., str],
) -> openai.OpenAI:
    return client_for(issue_key())


def target(vllm: FakeVLLM) -> VendorTarget:
    return VendorTarget(vendor="vllm-node", base_url=vllm.url, upstream_model=SERVED)


def expected_usage(reply: str, messages: list[dict[str, Any]] = HELLO) -> tuple[int, int]:
    return prompt_tokens(messages), len(reply.split(" "))


def _assert_billed_on_the_node(request_id: str, prompt: int, output: int) -> None:
    """Billed ``prompt`` input and ``output`` output tokens at ``vllm-node``'s price."""
    usage = Usage(input_tokens=prompt, output_tokens=output)
    assert_billed(request_id, model="test-vllm", vendor="vllm-node", usage=usage)


# --- /v1/models ------------------------------------------------------------------------------


def test_the_probe_reads_vllms_model_cards(vllm: FakeVLLM, transactional_db: None) -> None:
    vllm_catalog(vllm, verified=False)
    result = vendor_probe(vendor=Vendor.objects.get(name="vllm-node"))
    assert result.error == "" and result.models == (SERVED,)
    assert Vendor.objects.get(name="vllm-node").verified_models == [SERVED]
    assert health.health_of(["vllm-node"])["vllm-node"].state is CircuitState.CLOSED


# --- chat through the live app -----------------------------------------------------------------


def test_chat_with_vllm_sampling_extras(client: openai.OpenAI, on_vllm: FakeVLLM) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="test-vllm",
        messages=HELLO,
        max_tokens=50,
        temperature=0.7,
        extra_body={"top_k": 40, "repetition_penalty": 1.1},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Echo: hello there vllm"
    assert completion.choices[0].finish_reason == "stop"
    prompt, output = expected_usage("Echo: hello there vllm")
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (prompt, output)
    sent = on_vllm.requests[-1]
    assert sent["model"] == SERVED and sent["stream"] is False
    assert sent["top_k"] == 40 and sent["repetition_penalty"] == 1.1
    assert "stream_options" not in sent  # vLLM refuses stream_options on a non-stream request
    request_id = raw.headers["x-infrai-request-id"]
    _assert_billed_on_the_node(request_id, prompt, output)


def test_stream_without_include_usage_is_still_billed_from_vllms_usage(
    client: openai.OpenAI, on_vllm: FakeVLLM
) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="test-vllm", messages=HELLO, stream=True, max_tokens=50
    ) as response:
        request_id = response.headers["x-infrai-request-id"]
        text = "".join(
            choice.delta.content or "" for chunk in response.parse() for choice in chunk.choices
        )
    assert text == "Echo: hello there vllm"
    # vLLM sends usage in a stream only when asked: the adapter always asks
    assert on_vllm.requests[-1]["stream_options"] == {"include_usage": True}
    prompt, output = expected_usage(text)
    _assert_billed_on_the_node(request_id, prompt, output)


def test_stream_with_include_usage_reports_vllms_numbers(
    client: openai.OpenAI, on_vllm: FakeVLLM
) -> None:
    stream = client.chat.completions.create(
        model="test-vllm",
        messages=HELLO,
        stream=True,
        max_tokens=50,
        stream_options={"include_usage": True},
    )
    usages = [chunk.usage for chunk in stream if chunk.usage is not None]
    assert len(usages) == 1
    prompt, output = expected_usage("Echo: hello there vllm")
    assert (usages[0].prompt_tokens, usages[0].completion_tokens) == (prompt, output)


def test_json_schema_reaches_vllms_guided_decoding(
    client: openai.OpenAI, on_vllm: FakeVLLM
) -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    completion = client.chat.completions.create(
        model="test-vllm",
        messages=HELLO,
        max_tokens=50,
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    )
    assert completion.choices[0].message.content == '{"ok": true}'
    sent = on_vllm.requests[-1]["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}


def test_vllms_context_length_400_is_the_callers_error_and_not_retried(
    client: openai.OpenAI, on_vllm: FakeVLLM
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="test-vllm",
            messages=HELLO,
            max_tokens=4000,  # within the catalog's limits, beyond the node's max_model_len 2048
        )
    assert caught.value.status_code == 400
    # vLLM's message names no code: the gateway maps it to OpenAI's
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", "messages")
    assert len(on_vllm.requests) == 1  # a request error: no retry, no failover
    assert health.health_of(["vllm-node"])["vllm-node"].consecutive_failures == 0


def test_an_error_event_inside_a_vllm_stream_is_not_a_silent_success(
    client: openai.OpenAI, on_vllm: FakeVLLM
) -> None:
    on_vllm.fault = "stream_error"
    received: list[str] = []
    with pytest.raises(openai.APIError):
        stream = client.chat.completions.create(
            model="test-vllm",
            messages=HELLO,
            stream=True,
            max_tokens=50,
        )
        for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(received) != "Echo: hello there vllm"


# --- the adapter alone: vLLM-only fields and error shapes ----------------------------------------


def test_the_adapter_passes_vllm_only_fields_through(vllm: FakeVLLM) -> None:
    payload = {
        "messages": HELLO,
        "max_tokens": 20,
        "min_p": 0.05,
        "top_k": 20,
        "guided_choice": ["positive", "negative"],
        "guided_decoding_backend": "xgrammar",
    }
    answer = asyncio.run(OpenAICompatibleAdapter().chat(target(vllm), payload))
    assert answer["choices"][0]["message"]["content"] == "positive"
    assert answer["choices"][0]["stop_reason"] is None  # vLLM's own field survives
    sent = vllm.requests[-1]
    assert {k: sent[k] for k in ("min_p", "top_k", "guided_choice")} == {
        "min_p": 0.05,
        "top_k": 20,
        "guided_choice": ["positive", "negative"],
    }


def test_vllm_400_is_a_rejected_request_with_vllms_message(vllm: FakeVLLM) -> None:
    payload = {"messages": HELLO, "guided_json": {"type": "object"}, "guided_regex": "a+"}
    with pytest.raises(errors.VendorRejected) as caught:
        asyncio.run(OpenAICompatibleAdapter().chat(target(vllm), payload))
    assert caught.value.status == 400 and not caught.value.retryable
    assert "only use one kind of guided decoding" in caught.value.message


def test_vllm_404_for_a_wrong_served_model_name_fails_over(vllm: FakeVLLM) -> None:
    wrong = VendorTarget(vendor="vllm-node", base_url=vllm.url, upstream_model="llama-typo")
    with pytest.raises(errors.VendorMisconfigured) as caught:
        asyncio.run(OpenAICompatibleAdapter().chat(wrong, {"messages": HELLO}))
    assert caught.value.status == 404 and caught.value.retryable
    assert "`llama-typo` does not exist" in caught.value.message


def test_legacy_flat_vllm_errors_keep_their_status_class_and_message(vllm: FakeVLLM) -> None:
    vllm.legacy_errors = True
    payload = {"messages": HELLO, "min_p": 3.0}
    with pytest.raises(errors.VendorRejected) as caught:
        asyncio.run(OpenAICompatibleAdapter().chat(target(vllm), payload))
    assert caught.value.status == 400 and not caught.value.retryable
    assert "min_p must be in [0, 1], got 3.0" in caught.value.message
    assert vllm.requests[-1]["min_p"] == 3.0
