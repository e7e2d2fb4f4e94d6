"""The platform's parameter rules and the catalog matrix on /v1/chat/completions."""

from __future__ import annotations

import httpx
import openai
import pytest

from billing.models import Hold

pytestmark = pytest.mark.usefixtures("fake_catalog")

MESSAGES = [{"role": "user", "content": "hi"}]
PENALTY = (
    "Invalid value for '{name}': {value}. This deployment does not implement '{name}', so only 0 "
    "is accepted. Use 'repetition_penalty' to penalize repetition."
)


def _bad(client, **kwargs):
    kwargs.setdefault("model", "test-large")
    kwargs.setdefault("messages", MESSAGES)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**kwargs)
    return info.value.body


@pytest.mark.parametrize("name", ["frequency_penalty", "presence_penalty"])
def test_penalties_other_than_zero_get_the_exact_spec_error(
    issue_key, client_for, fake_catalog, name
):
    client = client_for(issue_key())
    body = _bad(client, **{name: 0.5})
    assert body["message"] == PENALTY.format(name=name, value="0.5")
    assert body["code"] == "invalid_value" and body["param"] == name
    assert fake_catalog["primary"].requests == []
    ok = client.chat.completions.create(model="test-large", messages=MESSAGES, **{name: 0})
    assert ok.choices[0].message.content == "Echo: hi"
    assert name not in fake_catalog["primary"].requests[-1]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"extra_body": {"repetition_penalty": 0.5}}, "repetition_penalty"),
        ({"extra_body": {"repetition_penalty": 2.5}}, "repetition_penalty"),
        ({"extra_body": {"top_k": 0}}, "top_k"),
        ({"extra_body": {"top_k": 1.5}}, "top_k"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"n": 0}, "n"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"extra_body": {"prefer": "random"}}, "prefer"),
        ({"extra_body": {"bogus": 1}}, "bogus"),
    ],
)
def test_invalid_requests_name_the_param_and_touch_nothing(
    issue_key, client_for, fake_catalog, kwargs, param
):
    body = _bad(client_for(issue_key()), **kwargs)
    assert body["param"] == param
    assert body["type"] == "invalid_request_error"
    assert fake_catalog["primary"].requests == []
    assert not Hold.objects.exists()


def test_oversized_body_is_413_before_anything_else(api_base, issue_key, settings):
    settings.INFRAI_MAX_BODY_BYTES = 2048
    r = httpx.post(
        api_base + "/chat/completions",
        json={"model": "test-large", "messages": [{"role": "user", "content": "x" * 5000}]},
        headers={"authorization": f"Bearer {issue_key()}"},
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert not Hold.objects.exists()


def test_honoured_parameters_are_forwarded(issue_key, client_for, fake_catalog):
    client_for(issue_key()).chat.completions.create(
        model="test-large",
        messages=MESSAGES,
        temperature=0.7,
        seed=3,
        extra_body={"top_k": 40, "repetition_penalty": 1.1},
    )
    sent = fake_catalog["primary"].requests[-1]
    assert (sent["top_k"], sent["repetition_penalty"], sent["seed"], sent["temperature"]) == (
        40,
        1.1,
        3,
        0.7,
    )


def test_no_effect_parameters_are_reported(issue_key, client_for):
    raw = client_for(issue_key()).chat.completions.with_raw_response.create(
        model="test-quirky", messages=MESSAGES, seed=7
    )
    assert raw.parse().infrai["ignored_params"] == ["seed"]
    assert raw.headers["x-infrai-ignored-params"] == "seed"


def test_failing_parameter_on_a_pinned_model_is_our_400(issue_key, client_for, fake_catalog):
    client = client_for(issue_key())
    body = _bad(client, model="test-quirky", logit_bias={"50256": -100})
    assert body["param"] == "logit_bias" and "test-quirky" in body["message"]
    body = _bad(client, model="test-quirky", extra_body={"repetition_penalty": 1.2})
    assert body["param"] == "repetition_penalty"
    ok = client.chat.completions.create(
        model="test-quirky", messages=MESSAGES, extra_body={"repetition_penalty": 1.0}
    )
    assert ok.infrai["model"] == "test-quirky"
    assert [r["model"] for r in fake_catalog["primary"].requests] == ["up-quirky"]


def test_routing_modes_avoid_models_where_a_parameter_fails(issue_key, client_for):
    client = client_for(issue_key())
    cheapest = client.chat.completions.create(model="cheapest", messages=MESSAGES)
    assert cheapest.infrai["model"] == "test-small"
    smartest = client.chat.completions.create(
        model="smartest", messages=MESSAGES, logit_bias={"1": 1}
    )
    assert smartest.infrai["model"] == "test-large"
    assert smartest.infrai["routing"]["mode"] == "smartest"


def test_unknown_model_is_404(issue_key, client_for):
    with pytest.raises(openai.NotFoundError) as info:
        client_for(issue_key()).chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"
