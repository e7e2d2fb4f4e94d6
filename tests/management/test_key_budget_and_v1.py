"""Keys made over the management API at work on ``/v1`` (the official SDK → live app → fake
vendors): a per-key monthly budget, and usage figures equal to the request log and ledger."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from django.db.models import Sum

from accounts.models import ApiKey
from billing.models import EntryKind, LedgerEntry
from billing.services.wallet import wallet_credit
from inference.models import RequestLog
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import _fake_servers, fake_catalog, fakes  # noqa: F401
from tests.management.test_auth import error_of

pytestmark = pytest.mark.usefixtures("fake_catalog")

HELLO = [{"role": "user", "content": "hello there"}]


def _fund(tenant: Any, usd: int = 5) -> None:
    wallet_credit(
        organization=tenant.org,
        amount_nanos=usd * 1_000_000_000,
        kind=EntryKind.CREDIT,
        idempotency_key=f"mgmt-budget-{tenant.org.pk}-{time.monotonic_ns()}",
    )


def _new_key(tenant: Any, project_id: str, **fields: Any) -> dict[str, Any]:
    created = tenant.http.post(f"/projects/{project_id}/api_keys", json=fields)
    assert created.status_code == 201, created.text
    return created.json()  # type: ignore[no-any-return]


def _sdk(live_url: str, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=live_url + "/v1", api_key=secret, max_retries=0)


def test_a_key_budget_set_over_the_api_holds_on_v1_and_spares_the_other_keys(
    tenant,
    live_url,
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
):
    _fund(tenant)
    project = tenant.http.post("/projects", json={"name": "svc"}).json()["id"]
    capped = _new_key(tenant, project, name="capped", monthly_budget_usd="0")
    other = _new_key(tenant, project, name="free")
    assert (capped["monthly_budget_usd"], other["monthly_budget_usd"]) == ("0", None)
    assert ApiKey.objects.get(pk=int(capped["id"][4:])).monthly_budget_nanos == 0

    calls_before = len(fake_catalog["primary"].requests)
    with pytest.raises(openai.APIStatusError) as refused:
        _sdk(live_url, capped["value"]).chat.completions.create(model="test-large", messages=HELLO)
    assert refused.value.status_code == 402
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["type"]) == ("key_budget_exceeded", "insufficient_quota")
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert len(fake_catalog["primary"].requests) == calls_before  # refused before the vendor

    served = _sdk(live_url, other["value"]).chat.completions.create(
        model="test-large", messages=HELLO
    )
    assert served.choices[0].message.content == "Echo: hello there"

    # Raised over the API: effective on the key's next call (its cached lookup is dropped).
    url = f"/projects/{project}/api_keys/{capped['id']}"
    raised = tenant.http.post(url, json={"monthly_budget_usd": "1"})
    assert raised.json()["monthly_budget_usd"] == "1"
    _sdk(live_url, capped["value"]).chat.completions.create(model="test-large", messages=HELLO)
    spent = -LedgerEntry.objects.filter(api_key_id=int(capped["id"][4:])).aggregate(
        s=Sum("amount_nanos")
    )["s"]
    assert spent > 0

    # Lowered to what it has spent: the next call is refused at once, the other key goes on.
    lowered = tenant.http.post(url, json={"monthly_budget_usd": f"{spent / 1e9:.9f}"})
    assert lowered.status_code == 200, lowered.text
    with pytest.raises(openai.APIStatusError) as again:
        _sdk(live_url, capped["value"]).chat.completions.create(model="test-large", messages=HELLO)
    assert again.value.status_code == 402
    assert (
        _sdk(live_url, other["value"])
        .chat.completions.create(model="test-large", messages=HELLO)
        .choices
    )

    cleared = tenant.http.post(url, json={"monthly_budget_usd": None, "name": "uncapped"})
    assert (cleared.json()["monthly_budget_usd"], cleared.json()["name"]) == (None, "uncapped")
    assert cleared.json()["requests_per_minute"] == capped["requests_per_minute"]  # kept
    _sdk(live_url, capped["value"]).chat.completions.create(model="test-large", messages=HELLO)

    bad = tenant.http.post(url, json={"monthly_budget_usd": "-1"})
    assert (bad.status_code, error_of(bad)["param"]) == (400, "monthly_budget_usd")


def test_usage_and_costs_equal_the_request_log_and_the_ledger_after_real_calls(tenant, live_url):
    _fund(tenant)
    project = tenant.http.post("/projects", json={"name": "metered"}).json()["id"]
    keys = [_new_key(tenant, project, name=f"k{n}") for n in range(2)]
    start = int(time.time()) // 86400 * 86400
    for n, key in enumerate(keys):
        for _ in range(n + 2):
            _sdk(live_url, key["value"]).chat.completions.create(model="test-large", messages=HELLO)

    logs = RequestLog.objects.filter(organization_id=tenant.org.pk)
    ledger = LedgerEntry.objects.filter(wallet__organization=tenant.org, kind=EntryKind.USAGE)
    log_cost = logs.aggregate(c=Sum("cost_nanos"))["c"]
    assert logs.count() == ledger.count() == 5
    assert log_cost > 0 and log_cost == -ledger.aggregate(s=Sum("amount_nanos"))["s"]

    usage = tenant.http.get(
        "/usage/completions", params={"start_time": start, "group_by": "api_key_id"}
    ).json()
    rows = [r for bucket in usage["data"] for r in bucket["results"]]
    for key in keys:
        mine = [r for r in rows if r["api_key_id"] == key["id"]]
        key_logs = logs.filter(api_key_id=int(key["id"][4:]))
        key_ledger = ledger.filter(api_key_id=int(key["id"][4:]))
        assert sum(r["num_model_requests"] for r in mine) == key_logs.count()
        tokens = key_logs.aggregate(s=Sum("input_tokens"))["s"]
        assert sum(r["input_tokens"] for r in mine) == tokens
        usd = sum(round(float(r["cost_usd"]) * 1e9) for r in mine)
        assert usd == -key_ledger.aggregate(s=Sum("amount_nanos"))["s"]

    costs = tenant.http.get("/costs", params={"start_time": start}).json()
    total = sum(
        round(float(r["amount"]["value"]) * 1e9) for b in costs["data"] for r in b["results"]
    )
    assert total == log_cost
