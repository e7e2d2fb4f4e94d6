"""vLLM's own request fields through the gateway: ``min_p`` and guided decoding.

They are accepted (type and range checked: a 400 naming the field before any vendor is called),
forwarded as they are, and routed only to models whose catalog entry lists the field as a
capability: ``test-vllm`` (on the fake vLLM node, :mod:`tests.fakes.vllm`) lists them all,
``test-plain`` (an OpenAI-compatible fake that knows none of them) lists none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from billing.models import Hold
from catalog.documents import catalog_load
from catalog.models import Vendor
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.vendors import FakeVendor
from tests.fakes.vllm import FakeVLLM

SERVED = "meta-llama/Llama-3.1-8B-Instruct"
EXTRAS = ["min_p", "guided_json", "guided_regex", "guided_choice", "guided_grammar"]
HELLO: list[Any] = [{"role": "user", "content": "hello there vllm"}]


def _model(model_id: str, vendor: str, upstream: str, capabilities: list[str]) -> dict[str, Any]:
    return catalog_model(
        model_id,
        capabilities=capabilities,
        context_window=2048,
        max_output_tokens=1024,
        offerings=[offering(vendor, upstream, PRICE)],
    )


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[FakeVLLM, FakeVendor]]:
    with (
        FakeVLLM(served_model=SERVED, max_model_len=2048) as vllm,
        FakeVendor(models=["up-plain"]) as plain,
    ):
        yield vllm, plain


@pytest.fixture
def catalog(
    nodes: tuple[FakeVLLM, FakeVendor], transactional_db: None
) -> tuple[FakeVLLM, FakeVendor]:
    """``test-vllm`` (every vLLM extra) on the vLLM fake, ``test-plain`` (none) on the other."""
    vllm, plain = nodes
    vllm.reset()
    plain.reset()
    vendors = [
        catalog_vendor(
            "vllm-node",
            display_name="vLLM node",
            base_url=vllm.url,
            region="self-hosted",
            verified_models=[SERVED],
        ),
        catalog_vendor(
            "plain", display_name="Plain", base_url=plain.url, verified_models=["up-plain"]
        ),
    ]
    models = [
        _model("test-vllm", "vllm-node", SERVED, ["chat", "json_mode", *EXTRAS]),
        _model("test-plain", "plain", "up-plain", ["chat", "json_mode"]),
    ]
    Vendor.objects.exclude(name__in=["vllm-node", "plain"]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})
    return vllm, plain


@pytest.fixture
def client(
    catalog: tuple[FakeVLLM, FakeVendor],
    client_for: Callable[..., openai.OpenAI],
    issue_key: Callable[..., str],
) -> openai.OpenAI:
    return client_for(issue_key())


def test_min_p_and_guided_choice_reach_vllm(
    client: openai.OpenAI, catalog: tuple[FakeVLLM, FakeVendor]
) -> None:
    vllm, _plain = catalog
    completion = client.chat.completions.create(
        model="test-vllm",
        messages=HELLO,
        max_tokens=20,
        extra_body={"min_p": 0.05, "guided_choice": ["positive", "negative"]},
    )
    assert completion.choices[0].message.content == "positive"
    sent = vllm.requests[-1]
    assert sent["min_p"] == 0.05 and sent["guided_choice"] == ["positive", "negative"]


def test_a_guided_json_schema_as_a_string_is_forwarded_unchanged(
    client: openai.OpenAI, catalog: tuple[FakeVLLM, FakeVendor]
) -> None:
    vllm, _plain = catalog
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    client.chat.completions.create(
        model="test-vllm", messages=HELLO, max_tokens=20, extra_body={"guided_json": schema}
    )
    assert vllm.requests[-1]["guided_json"] == schema


def test_auto_routes_a_guided_request_to_the_model_that_lists_it(
    client: openai.OpenAI, catalog: tuple[FakeVLLM, FakeVendor]
) -> None:
    vllm, plain = catalog
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=HELLO, max_tokens=20, extra_body={"guided_regex": "[a-z]+"}
    )
    assert raw.parse().model == "test-vllm"
    assert vllm.requests[-1]["guided_regex"] == "[a-z]+"
    assert plain.requests == []


def test_a_model_without_the_capability_refuses_the_field_before_any_call(
    client: openai.OpenAI, catalog: tuple[FakeVLLM, FakeVendor]
) -> None:
    vllm, plain = catalog
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="test-plain", messages=HELLO, max_tokens=20, extra_body={"min_p": 0.1}
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("unsupported_capability", "min_p")
    assert plain.requests == [] and vllm.requests == []
    assert not Hold.objects.exists()


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"min_p": 1.5}, "min_p", "invalid_value"),
        ({"min_p": "0.1"}, "min_p", "invalid_type"),
        ({"guided_choice": []}, "guided_choice", "invalid_type"),
        ({"guided_choice": ["a", 2]}, "guided_choice", "invalid_type"),
        ({"guided_json": 5}, "guided_json", "invalid_type"),
        ({"guided_json": "{not json"}, "guided_json", "invalid_type"),
        ({"guided_regex": ""}, "guided_regex", "invalid_type"),
        ({"guided_grammar": ["root ::= x"]}, "guided_grammar", "invalid_type"),
        (
            {"guided_json": {"type": "object"}, "guided_regex": "a+"},
            "guided_regex",
            "invalid_value",
        ),
    ],
)
def test_a_malformed_vllm_field_is_a_400_naming_it_before_any_call(
    client: openai.OpenAI,
    catalog: tuple[FakeVLLM, FakeVendor],
    extra: dict[str, Any],
    param: str,
    code: str,
) -> None:
    vllm, _plain = catalog
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="test-vllm", messages=HELLO, max_tokens=20, extra_body=extra
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == (code, param)
    assert vllm.requests == []
    assert not Hold.objects.exists()
