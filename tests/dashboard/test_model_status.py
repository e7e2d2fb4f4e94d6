"""The model status page: circuit state per vendor, success rate and latency per model and
vendor from every organization's calls — percentages only, above a minimum sample."""

from __future__ import annotations

import re
from datetime import timedelta

import numpy as np
import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Role
from catalog import health
from catalog.documents import catalog_load
from catalog.models import Vendor
from dashboard import selectors
from inference.models import RequestLog, RequestStatus
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_vendor_catalog() -> None:
    """``m-one`` served by alpha and beta, ``m-two`` by beta only."""
    Vendor.objects.update(enabled=False)
    vendors = [
        catalog_vendor(name, base_url=f"http://127.0.0.1:9/{name}", verified_models=["up"])
        for name in ("alpha", "beta")
    ]
    models = [
        catalog_model(
            "m-one",
            capabilities=["chat"],
            offerings=[offering("alpha", "up", PRICE), offering("beta", "up", PRICE)],
        ),
        catalog_model("m-two", capabilities=["chat"], offerings=[offering("beta", "up", PRICE)]),
    ]
    catalog_load({"vendors": vendors, "models": models})


def _rows(org_id: int, n: int, *, ago: timedelta, **fields: object) -> list[int]:
    """``n`` calls of ``org_id`` made ``ago`` before now, latencies 10, 20, … ms."""
    now = timezone.now()
    latencies = [10 * (i + 1) for i in range(n)]
    RequestLog.objects.bulk_create(
        [
            request_log_row(
                organization_id=org_id,
                save=False,
                created_at=now - ago,
                latency_ms=latency,
                **fields,
            )
            for latency in latencies
        ]
    )
    return latencies


def _cells(html: str, attr: str, name: str) -> list[str]:
    row = re.search(rf'<tr {attr}="{re.escape(name)}">(.*?)</tr>', html, re.S)
    assert row, name
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row.group(1), re.S)
    ]


def test_health_latency_and_success_rate_per_model_and_vendor(
    two_vendor_catalog, member_client, make_org
):
    client, _, org = member_client(Role.MEMBER)
    other = make_org("Other")
    # The last hour: alpha serves m-one 30 times (org), beta fails it 15 times (other org).
    hour_ok = _rows(org.pk, 30, ago=timedelta(minutes=10), model="m-one", vendor="alpha")
    _rows(
        other.pk,
        15,
        ago=timedelta(minutes=5),
        model="m-one",
        vendor="beta",
        status=RequestStatus.VENDOR_ERROR,
        http_status=502,
    )
    # Earlier today: 20 more ok calls of m-one at alpha; client errors never count.
    day_ok = _rows(other.pk, 20, ago=timedelta(hours=5), model="m-one", vendor="alpha")
    _rows(
        org.pk,
        40,
        ago=timedelta(minutes=1),
        model="m-one",
        vendor="alpha",
        status=RequestStatus.CLIENT_ERROR,
        http_status=400,
    )
    # Yesterday's calls are outside both windows; m-two has too few calls to show figures.
    _rows(org.pk, 50, ago=timedelta(days=2), model="m-one", vendor="alpha")
    _rows(org.pk, 5, ago=timedelta(minutes=3), model="m-two", vendor="beta")
    for _ in range(settings.INFRAI_CIRCUIT_FAILURE_THRESHOLD):
        health.record_failure("beta")

    html = client.get(f"/o/{org.slug}/status/").content.decode()

    hour_p = np.percentile(hour_ok, [50, 95])
    day_p = np.percentile(hour_ok + day_ok, [50, 95])
    assert _cells(html, "data-model", "m-one") == [
        "m-one",
        "Degraded",
        "alpha, beta circuit open",
        "66.7%",  # 30 ok of 45 in the hour
        f"{round(hour_p[0])} / {round(hour_p[1])} ms",
        "76.9%",  # 50 ok of 65 in the day
        f"{round(day_p[0])} / {round(day_p[1])} ms",
    ]
    assert _cells(html, "data-model", "m-two") == [
        "m-two",
        "Outage",
        "beta circuit open",
        "too few calls",
        "—",
        "too few calls",
        "—",
    ]
    assert _cells(html, "data-vendor", "alpha")[:3] == ["alpha", "Closed (calls flow)", "100.0%"]
    beta = _cells(html, "data-vendor", "beta")
    # 5 ok (m-two) of 20: enough for figures at the vendor, not for m-two alone.
    assert beta[:4] == ["beta", "Open (calls stopped)", "25.0%", "30 / 48 ms"]


def test_no_counts_of_anyones_calls_are_shown(two_vendor_catalog, member_client, make_org):
    client, _, org = member_client(Role.MEMBER)
    _rows(make_org("Other").pk, 37, ago=timedelta(minutes=5), model="m-one", vendor="alpha")
    html = client.get(f"/o/{org.slug}/status/").content.decode()
    tables = re.findall(r"<tbody>(.*?)</tbody>", html, re.S)
    cells = [
        re.sub(r"<[^>]+>", "", c).strip()
        for t in tables
        for c in re.findall(r"<td[^>]*>(.*?)</td>", t, re.S)
    ]
    figures = [c for c in cells if any(ch.isdigit() for ch in c)]
    assert figures  # the page does show figures…
    for cell in figures:  # …only as percentages and latencies
        assert re.fullmatch(r"\d+(\.\d)?%|\d+ / \d+ ms", cell), cell
    assert "37" not in re.sub(r"\d+ / \d+ ms", "", " ".join(cells))


def test_the_page_is_a_fixed_number_of_queries_whatever_the_traffic(
    two_vendor_catalog, member_client
):
    client, _, org = member_client(Role.MEMBER)
    url = f"/o/{org.slug}/status/"

    def queries() -> int:
        cache.clear()
        with CaptureQueriesContext(connection) as seen:
            assert client.get(url).status_code == 200
        return len(seen)

    _rows(org.pk, 30, ago=timedelta(minutes=5), model="m-one", vendor="alpha")
    few = queries()
    for hours in range(1, 24):
        _rows(org.pk, 40, ago=timedelta(hours=hours), model="m-two", vendor="beta")
    assert queries() == few
    assert few <= 14
    # Within STATUS_CACHE_S every viewer reuses the figures: the two aggregates are not rerun.
    with CaptureQueriesContext(connection) as cached:
        client.get(url)
    assert len(cached) == few - 2
    assert selectors.STATUS_CACHE_S == 30


def test_every_member_role_sees_it_and_strangers_do_not(two_vendor_catalog, member_client):
    for role in (Role.OWNER, Role.ADMIN, Role.MEMBER, Role.BILLING):
        client, _, org = member_client(role)
        page = client.get(f"/o/{org.slug}/status/")
        assert page.status_code == 200 and 'data-model="m-one"' in page.content.decode()
    stranger, _, _ = member_client(Role.OWNER)
    assert stranger.get(f"/o/{org.slug}/status/").status_code == 404
