"""What bounds a generation through the gateway: a model's default output limit when the caller
sets none, a vendor request closed (and the local model's slot freed) when the caller leaves,
and refusals that say whether a retry can help (``x-should-retry``), so the OpenAI SDKs do not
turn one refused or timed-out call into three."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest

from billing.models import Hold, HoldStatus
from catalog.documents import SEED_PATH, catalog_load, read_document
from catalog.models import Model
from inference.chat.validation import parse_chat_request
from inference.models import RequestLog, RequestStatus
from money.pricing import cost_nanos, worst_case_usage
from tests.catalog_docs import catalog_model, offering
from tests.inference.conftest import (
    CHEAP_PRICE,
    LOCAL_MODELS,
    load_gateway_catalog,
    offering_price,
)
from tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HI = [{"role": "user", "content": "hi there"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {}}}
SMOL = "SmolLM2-135M-Instruct"


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


# --- the default output limit -------------------------------------------------------------------


@pytest.fixture
def capped_model(fake_catalog):  # type: ignore[no-untyped-def]
    """``test-capped`` on ``primary``: output limit 1000, default output limit 300."""
    entry = catalog_model(
        "test-capped",
        capabilities=["chat", "responses"],
        max_output_tokens=1000,
        offerings=[offering("primary", "up-small", CHEAP_PRICE)],
    )
    catalog_load({"models": [{**entry, "default_output_tokens": 300}]})
    return fake_catalog


def test_a_call_without_max_tokens_is_sent_and_held_for_the_default_output_limit(
    issue_key, client_for, capped_model
):
    client = client_for(issue_key())
    raw = client.chat.completions.with_raw_response.create(model="test-capped", messages=HI)
    assert capped_model["primary"].requests[-1]["max_tokens"] == 300
    upper = parse_chat_request({"model": "test-capped", "messages": HI}).prompt_tokens_upper
    hold = Hold.objects.get(request_id=raw.headers["x-infrai-request-id"])
    price = offering_price("test-capped", "primary")
    assert hold.amount_nanos == cost_nanos(
        price=price, usage=worst_case_usage(price, input_tokens=upper, output_tokens=300)
    )
    # A stream too, and the reserved maximum it announces is that hold.
    stream = client.chat.completions.with_raw_response.create(
        model="test-capped", messages=HI, stream=True
    )
    list(stream.parse())
    assert capped_model["primary"].requests[-1]["max_tokens"] == 300
    held = Hold.objects.get(request_id=stream.headers["x-infrai-request-id"]).amount_nanos
    assert held == hold.amount_nanos


def test_the_callers_own_cap_is_sent_unchanged_and_responses_get_the_default(
    issue_key, client_for, capped_model
):
    client_for(issue_key()).chat.completions.create(model="test-capped", messages=HI, max_tokens=40)
    assert capped_model["primary"].requests[-1]["max_tokens"] == 40
    client_for(issue_key(org="beta")).responses.create(
        model="test-capped", input="hi", max_output_tokens=50
    )
    assert capped_model["primary"].requests[-1]["max_tokens"] == 50
    client_for(issue_key(org="gamma")).responses.create(model="test-capped", input="hi")
    assert capped_model["primary"].requests[-1]["max_tokens"] == 300


def test_a_model_without_a_default_sends_no_cap(issue_key, client_for, fake_catalog):
    client_for(issue_key()).chat.completions.create(model="test-small", messages=HI)
    assert "max_tokens" not in fake_catalog["primary"].requests[-1]


def test_the_local_chat_model_has_a_small_documented_default(gateway_catalog, api_base, issue_key):
    assert Model.objects.get(model_id=SMOL).default_output_tokens == 512  # migration catalog.0005
    details = httpx.get(f"{api_base}/models/{SMOL}", headers=_bearer(issue_key())).json()
    assert details["default_output_tokens"] == 512
    assert details["max_output_tokens"] == 2048


# --- cancellation through the gateway, on the real model server ---------------------------------

# A generation that would run for minutes: end-of-turn banned, a long cap.
ENDLESS = {
    "max_tokens": 1500,
    "temperature": 1.0,
    "logit_bias": {"0": -100, "2": -100},  # SmolLM2's <|endoftext|>, <|im_end|>
}


def _batch(backend_url: str) -> float:
    for line in httpx.get(backend_url + "/metrics").text.splitlines():
        if line.startswith(f'infrai_gpu_backend_batch_size{{model="{SMOL}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no batch size in /metrics")


def _wait(condition: Callable[[], bool], bound_s: float = 30.0) -> None:
    """Poll until ``condition``; fail after ``bound_s`` (a bound on waiting, not a speed test)."""
    deadline = time.monotonic() + bound_s
    while not condition():
        assert time.monotonic() < deadline, "the model server still generates for nobody"
        time.sleep(0.05)


def test_a_caller_that_times_out_stops_the_local_generation(
    issue_key, client_for, gateway_catalog, backend_url
):
    client = client_for(issue_key(), timeout=3.0)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model=SMOL, messages=HI, **ENDLESS)
    _wait(lambda: _batch(backend_url) == 0)
    wait_for(lambda: RequestLog.objects.filter(status=RequestStatus.CANCELLED).exists())
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_a_stream_left_early_frees_the_slot_and_bills_the_models_own_prompt_count(
    issue_key, client_for, gateway_catalog, backend_url, api_base
):
    key = issue_key()
    body = {"model": SMOL, "messages": HI, "stream": True, **ENDLESS}
    with httpx.stream(
        "POST", api_base + "/chat/completions", json=body, headers=_bearer(key), timeout=60
    ) as response:
        request_id = response.headers["x-infrai-request-id"]
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 4:
                break
    _wait(lambda: _batch(backend_url) == 0)
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id, cost_nanos__gt=0).exists())
    log = RequestLog.objects.get(request_id=request_id)
    assert log.status == RequestStatus.CANCELLED
    # The prompt as the model counts it (its chat template), not cl100k_base's count of the text.
    own = httpx.post(
        backend_url + "/v1/chat/completions",
        json={"model": SMOL, "messages": HI, "max_tokens": 1},
    ).json()["usage"]["prompt_tokens"]
    assert log.input_tokens == own
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()


# --- refusals say whether a retry can help ------------------------------------------------------


@pytest.fixture
def seed_catalog(transactional_db, backend_url):  # type: ignore[no-untyped-def]
    """The whole shipped catalog as ``make run`` has it: no vendor credentials configured, the
    ``infrai-gpu`` vendor verified with the local models its /v1/models lists."""
    catalog_load(read_document(SEED_PATH))
    load_gateway_catalog(backend_url, LOCAL_MODELS, [])


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # The infrai spec's own example: no model tagged 'coding' is served here.
        (
            {"model": "auto", "extra": {"task": "coding", "prefer": "cheapest"}},
            "Tasks that can be served now: chat",
        ),
        # A pinned model whose only vendor does not list it (the six large local models).
        ({"model": "gpt-oss-120b"}, f"Models that can serve it now: {SMOL}"),
        # A pinned model whose vendor is not available here.
        ({"model": "gpt-4o-mini"}, f"Models that can serve it now: {SMOL}"),
    ],
)
def test_a_routing_refusal_that_waiting_cannot_change_is_not_retried(
    body, says, issue_key, client_for, seed_catalog
):
    sent: list[httpx.Request] = []
    counting = httpx.Client(event_hooks={"request": [sent.append]})
    client = client_for(issue_key(), max_retries=2, http_client=counting)  # the SDK's default
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(
            model=body["model"], messages=HI, extra_body=body.get("extra"), max_tokens=5
        )
    assert len(sent) == 1  # one attempt, not three
    response = info.value.response
    assert response.status_code == 503
    assert response.headers["x-should-retry"] == "false"
    assert info.value.code == "no_routable_offering"
    assert says in info.value.message


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "auto", "messages": HI, "task": "knitting"}, 400),
        ({"model": "no-such-model", "messages": HI}, 404),
        ({"model": SMOL, "messages": HI, "tools": [TOOL]}, 400),
    ],
)
def test_every_client_error_of_routing_says_do_not_retry(
    body, status, issue_key, api_base, seed_catalog
):
    r = httpx.post(api_base + "/chat/completions", json=body, headers=_bearer(issue_key()))
    assert r.status_code == status
    assert r.headers["x-should-retry"] == "false"


def test_a_vendor_timeout_is_not_retried_into_more_generations(
    issue_key, client_for, fake_catalog, settings
):
    settings.INFRAI_VENDOR_READ_TIMEOUT_S = 0.5
    fake_catalog["primary"].stall_s = 3
    fake_catalog["backup"].stall_s = 3
    client = client_for(issue_key(), max_retries=2)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="test-large", messages=HI)
    assert info.value.status_code == 504
    assert info.value.response.headers["x-should-retry"] == "false"
    assert "'max_tokens'" in info.value.message and "stream" in info.value.message
    # One call: one request to each vendor (the failover), not three rounds of them.
    assert len(fake_catalog["primary"].requests) == len(fake_catalog["backup"].requests) == 1
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
