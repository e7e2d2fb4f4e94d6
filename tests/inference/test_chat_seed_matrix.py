"""The spec's parameter table, as seeded, decides what reaches a vendor (one test per cell class).

The seed's ``infrai-gpu`` vendor (which serves the six spec models in production) is pointed
at a fake OpenAI-compatible server that lists them, so the real seed rows are what is tested.
"""

from __future__ import annotations

import openai
import pytest
import yaml

from catalog.documents import SEED_PATH, catalog_load
from tests.catalog_docs import SPEC_MODELS
from tests.fakes.vendors import FakeVendor

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def spec_vendor(fake_catalog: dict[str, FakeVendor]) -> FakeVendor:
    fake = fake_catalog["primary"]
    seed = yaml.safe_load(SEED_PATH.read_text())
    gpu = next(v for v in seed["vendors"] if v["name"] == "infrai-gpu")
    gpu = {
        **gpu,
        "base_url": fake.url,
        "base_url_setting": "",
        "enabled": True,
        "verified_models": SPEC_MODELS,
    }
    models = [m for m in seed["models"] if m["id"] in SPEC_MODELS]
    assert len(models) == 6
    catalog_load({"vendors": [gpu], "models": models})
    return fake


def test_honoured_cells_reach_the_vendor(issue_key, client_for, spec_vendor):
    client = client_for(issue_key())
    resp = client.chat.completions.create(
        model="gpt-oss-120b",
        messages=MESSAGES,
        logit_bias={"50256": -100},
        extra_body={"repetition_penalty": 1.1},
    )
    assert resp.infrai["ignored_params"] == []
    sent = spec_vendor.requests[-1]
    assert sent["model"] == "gpt-oss-120b"
    assert sent["logit_bias"] == {"50256": -100} and sent["repetition_penalty"] == 1.1


def test_no_effect_cells_are_accepted_and_reported(issue_key, client_for, spec_vendor):
    raw = client_for(issue_key()).chat.completions.with_raw_response.create(
        model="MiniMax-M3", messages=MESSAGES, logprobs=True, seed=5
    )
    assert sorted(raw.parse().infrai["ignored_params"]) == ["logprobs", "seed"]
    assert sorted(raw.headers["x-infrai-ignored-params"].split(",")) == ["logprobs", "seed"]
    raw = client_for(issue_key(org="o2")).chat.completions.with_raw_response.create(
        model="DeepSeek-V3.2", messages=MESSAGES, extra_body={"repetition_penalty": 1.1}
    )
    assert raw.parse().infrai["ignored_params"] == ["repetition_penalty"]


@pytest.mark.parametrize(
    ("model", "kwargs", "param"),
    [
        ("DeepSeek-V3.1", {"logit_bias": {"1": 5}}, "logit_bias"),
        ("Meta-Llama-3.3-70B-Instruct", {"logit_bias": {"1": 5}}, "logit_bias"),
        ("MiniMax-M3", {"extra_body": {"repetition_penalty": 1.2}}, "repetition_penalty"),
    ],
)
def test_failing_cells_are_our_400_and_never_reach_the_vendor(
    issue_key, client_for, spec_vendor, model, kwargs, param
):
    with pytest.raises(openai.BadRequestError) as info:
        client_for(issue_key()).chat.completions.create(model=model, messages=MESSAGES, **kwargs)
    assert info.value.body["param"] == param
    assert model in info.value.body["message"]
    assert spec_vendor.requests == []


def test_minimax_takes_repetition_penalty_at_one(issue_key, client_for, spec_vendor):
    resp = client_for(issue_key()).chat.completions.create(
        model="MiniMax-M3", messages=MESSAGES, extra_body={"repetition_penalty": 1.0}
    )
    assert resp.infrai["model"] == "MiniMax-M3"
