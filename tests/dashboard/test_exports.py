"""CSV exports of usage and the request log; failed calls in the log and its status filter;
the styled error pages and the favicon."""

from __future__ import annotations

import csv
import io

import pytest

from accounts.models import Role
from dashboard import exports
from inference.models import RequestStatus
from tests.dashboard.factories import at, request_log_row

pytestmark = pytest.mark.django_db


def _rows(response) -> list[list[str]]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.reader(io.StringIO(body.decode())))


def _failed(org, **fields):
    return request_log_row(
        organization_id=org.pk,
        status=RequestStatus.CLIENT_ERROR,
        http_status=402,
        error_code="insufficient_quota",
        error_message="The wallet cannot cover this call.",
        model="",
        vendor="",
        input_tokens=0,
        output_tokens=0,
        cost_nanos=0,
        **fields,
    )


def test_request_log_filters_failed_calls_and_shows_their_status_and_code(member_client):
    client, _, org = member_client(Role.MEMBER)
    ok = request_log_row(organization_id=org.pk)
    failed = _failed(org)
    page = client.get(f"/o/{org.slug}/usage/requests/?status=failed").content.decode()
    assert failed.request_id in page and ok.request_id not in page
    assert "402" in page and "insufficient_quota" in page
    page = client.get(f"/o/{org.slug}/usage/requests/?status=client_error").content.decode()
    assert failed.request_id in page and ok.request_id not in page
    page = client.get(f"/o/{org.slug}/usage/requests/?status=ok").content.decode()
    assert ok.request_id in page and failed.request_id not in page


def test_request_log_csv_has_the_page_s_filters_exact_costs_and_inert_text(member_client, make_org):
    client, _, org = member_client(Role.MEMBER)
    request_log_row(organization_id=org.pk, cost_nanos=1_234, model="=HYPERLINK(1)")
    _failed(org)
    request_log_row(organization_id=make_org("Other").pk, model="their-model")
    response = client.get(f"/o/{org.slug}/usage/requests/export.csv")
    assert response["Content-Type"] == "text/csv"
    assert "attachment" in response["Content-Disposition"]
    rows = _rows(response)
    assert rows[0] == exports.LOG_HEADER
    by_status = {r[6]: r for r in rows[1:]}
    assert len(rows) == 3 and "their-model" not in str(rows)
    assert by_status["ok"][4] == "'=HYPERLINK(1)" and by_status["ok"][13] == "0.000001234"
    failed = by_status["client_error"]
    assert (failed[7], failed[8]) == ("402", "insufficient_quota")
    only_failed = _rows(client.get(f"/o/{org.slug}/usage/requests/export.csv?status=failed"))
    assert [r[6] for r in only_failed[1:]] == ["client_error"]


def test_request_log_csv_pages_through_more_rows_than_one_query(make_org, monkeypatch):
    org = make_org()
    for _ in range(5):
        request_log_row(organization_id=org.pk)
    monkeypatch.setattr(exports, "PAGE", 2)
    from django.utils import timezone

    from inference.selectors import LogFilters, day_bounds

    lo, hi = day_bounds(timezone.now().date(), timezone.now().date())
    lines = list(
        exports.request_log_csv(organization_id=org.pk, start=lo, end=hi, filters=LogFilters())
    )
    ids = [line.split(",")[1] for line in lines[1:]]
    assert len(ids) == 5 and len(set(ids)) == 5


def test_usage_csv_per_day_and_per_model(member_client):
    client, _, org = member_client(Role.BILLING)
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 1), cost_nanos=5, model="a")
    request_log_row(organization_id=org.pk, created_at=at(2026, 3, 3), cost_nanos=7, model="b")
    base = f"/o/{org.slug}/usage/export.csv?start=2026-03-01&end=2026-03-03"
    days = _rows(client.get(base + "&by=day"))
    assert days[0][:5] == ["date", "requests", "input_tokens", "output_tokens", "cost_usd"]
    assert days[0][5:] == ["cached_input_tokens", "cache_write_tokens", "reasoning_tokens"]
    assert [(r[0], r[1], r[4]) for r in days[1:]] == [
        ("2026-03-01", "1", "0.000000005"),
        ("2026-03-02", "0", "0"),
        ("2026-03-03", "1", "0.000000007"),
    ]
    models = _rows(client.get(base + "&by=model"))
    assert models[0][0] == "model" and sorted(r[0] for r in models[1:]) == ["a", "b"]
    assert _rows(client.get(base + "&by=nonsense"))[0][0] == "date"


def test_exports_are_tenant_scoped(member_client, make_org):
    client, _, _ = member_client(Role.OWNER)
    other = make_org("Other")
    assert client.get(f"/o/{other.slug}/usage/export.csv").status_code == 404
    assert client.get(f"/o/{other.slug}/usage/requests/export.csv").status_code == 404


def test_unknown_pages_get_the_styled_404_and_the_500_page_renders(client, settings):
    settings.DEBUG = False
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    text = response.content.decode()
    assert "Page not found" in text and "app.css" in text and "favicon.svg" in text
    from django.template.loader import render_to_string

    page = render_to_string("500.html")
    assert "Something went wrong on our side" in page and "app.css" in page
    favicon = client.get("/favicon.ico")
    assert favicon.status_code == 301 and favicon["Location"].endswith("dashboard/favicon.svg")
