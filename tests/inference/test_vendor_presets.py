"""A seed preset enabled with a key, end to end: probed, routed, billed; its vendor rules decide
what reaches it (a refused parameter fails over or is a 400, an ignored one is reported)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from catalog.documents import SEED_PATH, catalog_load, read_document
from catalog.models import Vendor
from catalog.services import vendor_probe
from money.pricing import Usage
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import assert_400_before_any_hold, assert_billed

LLAMA = "Meta-Llama-3.3-70B-Instruct"
MESSAGES = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def _hosts() -> Iterator[dict[str, FakeVendor]]:
    servers = {
        "groq": FakeVendor(models=["llama-3.3-70b-versatile"]).start(),
        "ollama": FakeVendor(models=["llama3.3:70b"]).start(),
    }
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def presets(
    fake_catalog: dict[str, FakeVendor],
    _hosts: dict[str, FakeVendor],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, FakeVendor]:
    """The seed's Groq and Ollama presets as staff enable them — Groq with a key, Ollama with an
    offering added by hand (the dearest) — pointed at fakes and probed; the seed's Llama 3.3
    70B also on ``infrai-gpu`` (the fake ``primary``, verified without a probe)."""
    for server in _hosts.values():
        server.reset()
    monkeypatch.setenv("GROQ_API_KEY", "gsk-test-secret")
    seed = read_document(SEED_PATH)
    rows = {v["name"]: v for v in seed["vendors"]}
    groq = {**rows["groq"], "base_url": _hosts["groq"].url}
    ollama = {**rows["ollama"], "base_url": _hosts["ollama"].url, "enabled": True}
    gpu = {
        **rows["infrai-gpu"],
        "base_url": fake_catalog["primary"].url,
        "base_url_setting": "",
        "enabled": True,
        "verified_models": [LLAMA],
    }
    llama = next(m for m in seed["models"] if m["id"] == LLAMA)
    on_groq = next(o for o in seed["offerings"] if o["vendor"] == "groq" and o["model"] == LLAMA)
    price = {**on_groq["prices"][0], "source": "staff", "output_per_mtok_usd": "2.00"}
    on_ollama = {"vendor": "ollama", "model": LLAMA, "upstream_model": "llama3.3:70b",
                 "prices": [price]}  # fmt: skip
    catalog_load(
        {"vendors": [groq, ollama, gpu], "models": [llama], "offerings": [on_groq, on_ollama]}
    )
    for name in ("groq", "ollama"):
        found = vendor_probe(vendor=Vendor.objects.get(name=name))
        assert found.error == "" and found.models == tuple(_hosts[name].models)
    return {**_hosts, "gpu": fake_catalog["primary"]}


def test_a_preset_with_a_key_serves_its_model_and_bills_it_exactly(issue_key, client_for, presets):
    raw = client_for(issue_key()).chat.completions.with_raw_response.create(
        model=f"groq/{LLAMA}", messages=MESSAGES
    )
    resp = raw.parse()
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.infrai["vendor"] == "groq" and raw.headers["x-infrai-vendor"] == "groq"
    assert presets["groq"].requests[-1]["model"] == "llama-3.3-70b-versatile"
    usage = Usage(input_tokens=resp.usage.prompt_tokens, output_tokens=resp.usage.completion_tokens)
    assert usage.input_tokens == 2 and usage.output_tokens == 3
    assert assert_billed(resp.infrai["request_id"], model=LLAMA, vendor="groq", usage=usage) > 0


def test_a_parameter_the_preset_refuses_fails_over_to_another_vendor_of_the_model(
    issue_key, client_for, presets
):
    plain = client_for(issue_key()).chat.completions.create(model=LLAMA, messages=MESSAGES)
    assert plain.infrai["vendor"] == "groq"  # the cheapest vendor of the model
    presets["groq"].reset()
    resp = client_for(issue_key(org="o2")).chat.completions.create(
        model=LLAMA, messages=MESSAGES, logprobs=True
    )
    assert resp.infrai["vendor"] == "infrai-gpu"
    assert presets["groq"].requests == []  # never sent to the host that refuses it
    assert presets["gpu"].requests[-1]["logprobs"] is True
    excluded = {e["offering"]: e["reason"] for e in resp.infrai["routing"]["excluded"]}
    assert excluded[f"groq/{LLAMA}"] == "vendor groq does not accept 'logprobs'"
    usage = Usage(input_tokens=resp.usage.prompt_tokens, output_tokens=resp.usage.completion_tokens)
    assert_billed(resp.infrai["request_id"], model=LLAMA, vendor="infrai-gpu", usage=usage)


def test_a_pin_to_the_refusing_preset_is_a_400_naming_the_parameter_before_any_hold(
    api_base, issue_key, presets
):
    body = {"model": f"groq/{LLAMA}", "messages": MESSAGES, "top_logprobs": 2, "logprobs": True}
    response = assert_400_before_any_hold(
        api_base, issue_key(), "chat/completions", body, "logprobs"
    )
    assert "Vendor 'groq'" in response.json()["error"]["message"]
    body = {"model": f"groq/{LLAMA}", "messages": MESSAGES, "n": 2}
    assert_400_before_any_hold(api_base, issue_key(org="o2"), "chat/completions", body, "n")
    assert presets["groq"].requests == []


def test_n_of_one_is_what_the_preset_takes(issue_key, client_for, presets):
    resp = client_for(issue_key()).chat.completions.create(
        model=f"groq/{LLAMA}", messages=MESSAGES, n=1
    )
    assert resp.infrai["vendor"] == "groq" and resp.infrai["ignored_params"] == []


def test_a_parameter_the_preset_ignores_is_reported(issue_key, client_for, presets):
    raw = client_for(issue_key()).chat.completions.with_raw_response.create(
        model=f"ollama/{LLAMA}", messages=MESSAGES, n=1
    )
    resp = raw.parse()
    assert resp.infrai["vendor"] == "ollama"
    assert resp.infrai["ignored_params"] == ["n"] and raw.headers["x-infrai-ignored-params"] == "n"
    assert presets["ollama"].requests[-1]["model"] == "llama3.3:70b"


def test_the_refusal_reaches_the_sdk_as_a_bad_request(issue_key, client_for, presets):
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(
            model=f"groq/{LLAMA}", messages=MESSAGES, logprobs=True
        )
    assert info.value.body["param"] == "logprobs"
