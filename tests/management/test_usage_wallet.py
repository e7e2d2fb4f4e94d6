"""Usage, costs, the request log, the wallet and the model catalog over the management API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Sum
from django.utils import timezone

from accounts.services import project_create
from billing.models import EntryKind, LedgerEntry
from billing.services.wallet import wallet_credit
from inference.models import RequestLog
from tests.dashboard.factories import request_log_row
from tests.management.test_auth import error_of

DAY1 = datetime(2026, 3, 1, tzinfo=UTC)


def _seed(org_id: int, project_ids: list[int]) -> None:
    for n in range(6):
        request_log_row(
            organization_id=org_id,
            project_id=project_ids[n % 2],
            model="m-a" if n < 4 else "m-b",
            created_at=DAY1 + timedelta(hours=n * 7),  # spans two days
            input_tokens=10 + n,
            output_tokens=100 * n,
            cost_nanos=1_234_567 * (n + 1),
        )


def test_usage_and_costs_buckets_equal_the_request_log(tenant, make_tenant):
    p1, p2 = (project_create(organization=tenant.org, name=n) for n in ("a", "b"))
    _seed(tenant.org.pk, [p1.pk, p2.pk])
    _seed(make_tenant("Other").org.pk, [p1.pk, p2.pk])  # never counted for tenant
    start = int(DAY1.timestamp())
    params = {"start_time": start, "end_time": start + 3 * 86400, "group_by": "model"}
    body = tenant.http.get("/usage/completions", params=params).json()
    assert body["object"] == "page"
    assert [b["start_time"] for b in body["data"]] == [start + i * 86400 for i in range(3)]
    results = [r for b in body["data"] for r in b["results"]]
    logs = RequestLog.objects.filter(organization_id=tenant.org.pk)
    for model in ("m-a", "m-b"):
        mine = logs.filter(model=model)
        total = mine.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_nanos"))
        rows = [r for r in results if r["model"] == model]
        assert sum(r["num_model_requests"] for r in rows) == mine.count()
        assert sum(r["input_tokens"] for r in rows) == total["i"]
        assert sum(r["output_tokens"] for r in rows) == total["o"]
        assert sum(round(float(r["cost_usd"]) * 1e9) for r in rows) == total["c"]
    assert body["data"][2]["results"] == []

    hourly = tenant.http.get(
        "/usage/completions",
        params={"start_time": start, "bucket_width": "1h", "limit": 24, "group_by": "project_id"},
    ).json()
    assert len(hourly["data"]) == 24
    assert hourly["has_more"] is True
    first = hourly["data"][0]["results"]
    assert first[0]["project_id"] == f"proj_{p1.pk}"
    assert first[0]["num_model_requests"] == 1
    more = tenant.http.get(
        "/usage/completions",
        params={"start_time": start, "bucket_width": "1h", "page": hourly["next_page"]},
    ).json()
    assert more["data"][0]["start_time"] == start + 24 * 3600

    costs = tenant.http.get(
        "/costs", params={"start_time": start, "end_time": start + 2 * 86400}
    ).json()
    day_costs = [b["results"][0]["amount"] for b in costs["data"]]
    assert all(c["currency"] == "usd" for c in day_costs)
    assert (
        sum(round(float(c["value"]) * 1e9) for c in day_costs)
        == logs.aggregate(c=Sum("cost_nanos"))["c"]
    )

    bad = tenant.http.get("/usage/completions", params={"start_time": start, "group_by": "x"})
    assert (bad.status_code, error_of(bad)["param"]) == (400, "group_by")
    missing = tenant.http.get("/costs")
    assert (missing.status_code, error_of(missing)["param"]) == (400, "start_time")


def test_usage_carries_cache_reads_cache_writes_and_reasoning_tokens(tenant):
    for n in range(3):
        request_log_row(
            organization_id=tenant.org.pk,
            created_at=DAY1 + timedelta(hours=n),
            input_tokens=100,
            cached_input_tokens=40,
            cache_write_tokens=10 + n,
            output_tokens=60,
            reasoning_tokens=20 + n,
        )
    start = int(DAY1.timestamp())
    for params in (
        {"start_time": start, "end_time": start + 86400},  # a whole day: the rollups
        {"start_time": start, "end_time": start + 86400, "bucket_width": "1h"},  # the log
        {"start_time": start + 1800, "end_time": start + 86400},  # a partial day: the log
    ):
        body = tenant.http.get("/usage/completions", params=params).json()
        results = [r for b in body["data"] for r in b["results"]]
        assert sum(r["num_model_requests"] for r in results) == 3 - (params["start_time"] > start)
        n = 3 - (params["start_time"] > start)
        assert sum(r["input_cached_tokens"] for r in results) == 40 * n
        assert sum(r["input_cache_write_tokens"] for r in results) == sum(
            10 + k for k in range(3 - n, 3)
        )
        assert sum(r["output_reasoning_tokens"] for r in results) == sum(
            20 + k for k in range(3 - n, 3)
        )


def test_request_log_filters_and_cursor_pagination_over_several_pages(tenant):
    now = timezone.now()
    for n in range(25):
        request_log_row(
            organization_id=tenant.org.pk,
            model="m-a" if n % 5 else "m-b",
            status="ok" if n % 3 else "client_error",
            http_status=200 if n % 3 else 400,
            # Times out of id order, some equal, some in an earlier month's partition.
            created_at=now - timedelta(days=40 * (n % 2), minutes=n % 4),
        )
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": 10} | ({"after": after} if after else {})
        page = tenant.http.get("/requests", params=params).json()
        seen += [r["id"] for r in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    expected = list(
        RequestLog.objects.filter(organization_id=tenant.org.pk)
        .order_by("-created_at", "-pk")
        .values_list("request_id", flat=True)
    )
    assert seen == expected
    assert len(seen) == 25

    filtered = tenant.http.get("/requests", params={"model": "m-b", "status": "client_error"})
    rows = filtered.json()["data"]
    assert rows and all(r["model"] == "m-b" and r["status"] == "client_error" for r in rows)
    assert (
        len(rows)
        == RequestLog.objects.filter(
            organization_id=tenant.org.pk, model="m-b", status="client_error"
        ).count()
    )
    one = tenant.http.get(f"/requests/{rows[0]['id']}").json()
    assert one["cost_usd"] == "0.000001"
    future = tenant.http.get("/requests", params={"start_time": 4102444800}).json()
    assert future["data"] == []


def test_wallet_balance_ledger_pages_topup_and_models(tenant):
    for n in range(3):
        wallet_credit(
            organization=tenant.org,
            amount_nanos=1_500_000_000,
            kind=EntryKind.CREDIT,
            idempotency_key=f"mgmt-test-{tenant.org.pk}-{n}",
        )
    wallet = tenant.http.get("/wallet").json()
    total = LedgerEntry.objects.filter(wallet__organization=tenant.org).aggregate(
        s=Sum("amount_nanos")
    )["s"]
    assert wallet["balance_usd"] == f"{total / 1e9:g}"
    assert wallet["available_usd"] == wallet["balance_usd"]
    assert wallet["held_usd"] == "0"

    first = tenant.http.get("/wallet/ledger", params={"limit": 2}).json()
    assert first["has_more"] is True
    rest = tenant.http.get("/wallet/ledger", params={"limit": 100, "after": first["last_id"]})
    ids = [e["id"] for e in first["data"] + rest.json()["data"]]
    assert (
        len(ids)
        == len(set(ids))
        == LedgerEntry.objects.filter(wallet__organization=tenant.org).count()
    )
    assert first["data"][0]["amount_usd"] == "1.5"

    topup = tenant.http.post(
        "/wallet/topups",
        json={
            "amount_usd": "20",
            "success_url": "https://example.com/ok",
            "cancel_url": "https://example.com/no",
        },
    )
    assert topup.status_code in (201, 503)  # 503 when this server has no Stripe key
    if topup.status_code == 503:
        assert error_of(topup)["code"] == "payments_unavailable"
    invalid = tenant.http.post("/wallet/topups", json={"amount_usd": "abc"})
    assert (invalid.status_code, error_of(invalid)["param"]) == (400, "amount_usd")

    models = tenant.http.get("/models")
    assert models.status_code == 200
    assert models.json()["object"] == "list"
    assert all("pricing" in m for m in models.json()["data"])
