"""Chat completions end to end: the official SDK → live app → fake vendors, billed on the ledger."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from billing.models import Hold, HoldStatus, LedgerEntry
from inference.models import RequestLog
from money.pricing import PriceSnapshot, Usage, cost_nanos

pytestmark = pytest.mark.usefixtures("fake_catalog")

PRICE = PriceSnapshot(
    input_per_mtok_nanos=1_000_000_000,
    cached_input_per_mtok_nanos=500_000_000,
    output_per_mtok_nanos=2_000_000_000,
)


def _no_open_holds() -> bool:
    return not Hold.objects.filter(status=HoldStatus.OPEN).exists()


def test_plain_completion_is_served_priced_and_billed(issue_key, client_for, fake_catalog):
    key = issue_key(credit_usd="1")
    client = client_for(key)
    raw = client.chat.completions.with_raw_response.create(
        model="test-large", messages=[{"role": "user", "content": "hello there"}]
    )
    resp = raw.parse()
    assert resp.choices[0].message.content == "Echo: hello there"
    assert resp.model == "test-large"
    assert resp.id.startswith("chatcmpl-")
    usage = Usage(input_tokens=resp.usage.prompt_tokens, output_tokens=resp.usage.completion_tokens)
    expected = cost_nanos(price=PRICE, usage=usage)
    infrai = resp.infrai
    assert infrai["cost_nanos"] == expected
    assert infrai["vendor"] == "primary" and infrai["model"] == "test-large"
    assert infrai["region"] == "eu" and infrai["cache"] is False
    assert infrai["routing"]["mode"] == "pinned"
    assert raw.headers["x-infrai-vendor"] == "primary"
    assert raw.headers["x-infrai-request-id"] == infrai["request_id"]
    assert raw.headers["x-infrai-cost-usd"] == f"{expected / 1e9:.9f}".rstrip("0").rstrip(".")
    # the vendor got its own model name, and no max_tokens the caller did not ask for
    sent = fake_catalog["primary"].requests[-1]
    assert sent["model"] == "up-large" and "max_tokens" not in sent
    log = RequestLog.objects.get(request_id=infrai["request_id"])
    assert (log.input_tokens, log.output_tokens, log.cost_nanos) == (2, 3, expected)
    entry = LedgerEntry.objects.get(request_id=infrai["request_id"])
    assert entry.amount_nanos == -expected
    assert _no_open_holds()


def test_streamed_completion_arrives_chunk_by_chunk_with_infrai_last(issue_key, client_for):
    client = client_for(issue_key())
    chunks = list(
        client.chat.completions.create(
            model="test-large",
            messages=[{"role": "user", "content": "one two three four"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: one two three four"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 5
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 5
    assert last.infrai["vendor"] == "primary" and last.infrai["cost_nanos"] > 0
    assert all(c.id == last.id for c in chunks)
    entry = LedgerEntry.objects.get(request_id=last.infrai["request_id"])
    assert entry.amount_nanos == -last.infrai["cost_nanos"]
    assert _no_open_holds()


def test_validation_errors_reach_no_vendor_and_hold_nothing(issue_key, client_for, fake_catalog):
    client = client_for(issue_key())
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="test-large", messages=[{"role": "wizard", "content": "x"}]
        )
    assert info.value.body["param"] == "messages[0].role"
    assert fake_catalog["primary"].requests == []
    assert not Hold.objects.exists()


def test_malformed_json_is_400(api_base, issue_key):
    r = httpx.post(
        api_base + "/chat/completions",
        content=b"{nope",
        headers={"authorization": f"Bearer {issue_key()}", "content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert json.loads(r.text)["error"]["type"] == "invalid_request_error"
