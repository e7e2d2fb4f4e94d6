"""Usage aggregates, the request log with filters and keyset pages, the detail view."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from accounts.models import Role
from accounts.services import api_key_create, project_create
from inference import selectors
from inference.models import RequestLog
from inference.selectors import LogFilters, day_bounds
from tests.dashboard.factories import at, request_log_row

pytestmark = pytest.mark.django_db


def test_usage_by_day_sums_per_utc_day_and_fills_gaps(make_org):
    org = make_org()
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 1, 0), cost_nanos=5)
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 1, 23), cost_nanos=7)
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 3), output_tokens=1)
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 4))  # outside the range
    days = selectors.usage_by_day(
        organization_id=org.pk, start=date(2026, 3, 1), end=date(2026, 3, 3)
    )
    assert [(d.label, d.requests, d.cost_nanos) for d in days] == [
        ("2026-03-01", 2, 12),
        ("2026-03-02", 0, 0),
        ("2026-03-03", 1, 1_000),
    ]
    assert days[2].tokens == 11


def test_breakdowns_by_model_project_and_key_are_labelled_and_ordered_by_cost(make_org):
    org = make_org()
    project = project_create(organization=org, name="Backend")
    api_key, _ = api_key_create(project=project, name="ci")
    common = {"organization_id": org.pk, "project_id": project.pk, "api_key_id": api_key.pk}
    request_log_row(**common, model="cheap", cost_nanos=1)
    request_log_row(**common, model="dear", cost_nanos=100)
    request_log_row(**common, model="dear", cost_nanos=100)
    lo, hi = day_bounds(timezone.now().date(), timezone.now().date())
    by_model = selectors.usage_by(organization_id=org.pk, dimension="model", start=lo, end=hi)
    assert [(r.label, r.requests, r.cost_nanos) for r in by_model] == [
        ("dear", 2, 200),
        ("cheap", 1, 1),
    ]
    by_project = selectors.usage_by(organization_id=org.pk, dimension="project", start=lo, end=hi)
    assert [(r.label, r.cost_nanos) for r in by_project] == [("Backend", 201)]
    by_key = selectors.usage_by(organization_id=org.pk, dimension="key", start=lo, end=hi)
    assert by_key[0].label == f"ci ({api_key.display})"


def test_request_log_filters_and_keyset_pages(make_org):
    org = make_org()
    for i in range(5):
        request_log_row(organization_id=org.pk, vendor="openai" if i % 2 else "deepseek")
    request_log_row(organization_id=org.pk, status="vendor_error", http_status=502)
    lo, hi = day_bounds(timezone.now().date(), timezone.now().date())
    errors = selectors.request_log(
        organization_id=org.pk, start=lo, end=hi, filters=LogFilters(status="vendor_error")
    )
    assert [r.http_status for r in errors] == [502]
    deepseek = LogFilters(vendor="deepseek")
    first = selectors.request_log(
        organization_id=org.pk, start=lo, end=hi, filters=deepseek, limit=2
    )
    rest = selectors.request_log(
        organization_id=org.pk, start=lo, end=hi, filters=deepseek, before_id=first[-1].pk
    )
    assert len(first) == 2 and len(rest) == 1
    assert {r.pk for r in first}.isdisjoint({r.pk for r in rest})


def test_usage_pages_show_only_the_organizations_own_calls(member_client, make_org):
    client, _, org = member_client(Role.MEMBER)
    other = make_org("Other")
    mine = request_log_row(organization_id=org.pk, model="my-model")
    theirs = request_log_row(organization_id=other.pk, model="their-model")
    usage = client.get(f"/o/{org.slug}/usage/").content.decode()
    log = client.get(f"/o/{org.slug}/usage/requests/").content.decode()
    assert "my-model" in usage and "their-model" not in usage
    assert mine.request_id in log and theirs.request_id not in log
    assert client.get(f"/o/{org.slug}/usage/requests/{theirs.request_id}/").status_code == 404


def test_request_detail_shows_tokens_cost_latency_routing_and_failovers(member_client):
    client, _, org = member_client(Role.MEMBER)
    row = request_log_row(
        organization_id=org.pk,
        input_tokens=1234,
        output_tokens=56,
        cost_nanos=1_230_000,
        latency_ms=789,
        failovers=2,
        routing={"mode": "cheapest", "why": "lowest expected cost", "chosen": "a/m"},
    )
    text = client.get(f"/o/{org.slug}/usage/requests/{row.request_id}/").content.decode()
    for expected in ("1,234", "56", "$0.00123", "789 ms", "lowest expected cost", "Failovers"):
        assert expected in text, expected
    assert "<dd>2</dd>" in text


def test_date_range_validation_message(member_client):
    client, _, org = member_client(Role.MEMBER)
    text = client.get(f"/o/{org.slug}/usage/?start=2026-03-05&end=2026-03-01").content.decode()
    assert "The start date must be on or before the end date." in text


def test_pages_stay_a_fixed_number_of_queries_with_a_year_of_data(
    member_client, django_assert_max_num_queries
):
    """A year of calls (a few per day over many models): the pages aggregate in the database,
    so the query count does not grow with the data."""
    client, _, org = member_client(Role.OWNER)
    today = timezone.now().date()
    rows = [
        request_log_row(
            organization_id=org.pk,
            save=False,
            created_at=at(d.year, d.month, d.day, h),
            model=f"model-{(d.toordinal() + h) % 15}",
        )
        for d in (today - timedelta(days=n) for n in range(365))
        for h in (1, 9, 17)
    ]
    RequestLog.objects.bulk_create(rows)
    year = f"?start={today - timedelta(days=365)}&end={today}"
    with django_assert_max_num_queries(15):
        response = client.get(f"/o/{org.slug}/usage/{year}")
    assert response.status_code == 200
    assert "1,095" in response.content.decode()  # 365 × 3 requests in the totals
    with django_assert_max_num_queries(15):
        assert client.get(f"/o/{org.slug}/usage/requests/{year}").status_code == 200
