"""The usage page's charts: cost and tokens per day stacked by model or by key, with a y scale,
labelled axes and every day's numbers in the markup (asserted on the data, not on pixels)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import Role
from accounts.services import api_key_create, project_create
from dashboard.charts import Series, nice_ticks, stacked_bar_chart
from inference.models import RequestLog
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db


def _series(html: str, testid: str) -> dict[str, list[int]]:
    """``{series label: [value per day]}`` of one chart on the page."""
    chart = re.search(rf'<figure class="tchart" data-testid="{testid}">(.*?)</figure>', html, re.S)
    assert chart, testid
    return {
        label: [int(v) for v in values.split(",")]
        for label, values in re.findall(
            r'data-series="([^"]*)" data-values="([^"]*)"', chart.group(1)
        )
    }


def _seed(org, user) -> tuple[list[str], dict[str, object]]:
    """Calls over the last three days: model a/b through keys one/two."""
    project = project_create(organization=org, name="Web")
    one, _ = api_key_create(project=project, name="one", created_by=user)
    two, _ = api_key_create(project=project, name="two", created_by=user)
    now = timezone.now()
    plan = [  # (days ago, model, key, cost, input, output)
        (2, "model-a", one, 1_000_000, 10, 5),
        (2, "model-b", two, 3_000_000, 20, 0),
        (1, "model-a", two, 2_000_000, 7, 3),
        (0, "model-a", one, 4_000_000, 100, 50),
        (0, "model-a", one, 1_000_000, 1, 1),
        (0, "model-b", one, 6_000_000, 30, 30),
    ]
    RequestLog.objects.bulk_create(
        [
            request_log_row(
                organization_id=org.pk,
                save=False,
                created_at=now - timedelta(days=ago),
                model=model,
                api_key_id=key.pk,
                project_id=project.pk,
                cost_nanos=cost,
                input_tokens=i,
                output_tokens=o,
            )
            for ago, model, key, cost, i, o in plan
        ]
    )
    return [(now - timedelta(days=d)).date().isoformat() for d in (2, 1, 0)], {
        "one": one,
        "two": two,
    }


def test_cost_and_tokens_per_day_stacked_by_model(member_client):
    client, user, org = member_client(Role.OWNER)
    _seed(org, user)
    html = client.get(f"/o/{org.slug}/usage/").content.decode()
    cost = _series(html, "chart-cost")
    assert list(cost) == ["model-b", "model-a"]  # by cost over the range, largest first
    assert cost["model-a"][-3:] == [1_000_000, 2_000_000, 5_000_000]
    assert cost["model-b"][-3:] == [3_000_000, 0, 6_000_000]
    assert len(cost["model-a"]) == 30 and sum(cost["model-a"][:-3]) == 0  # the default 30 days
    tokens = _series(html, "chart-tokens")
    assert tokens["model-a"][-3:] == [15, 10, 152]
    assert tokens["model-b"][-3:] == [20, 0, 60]


def test_the_charts_split_by_key(member_client):
    client, user, org = member_client(Role.OWNER)
    _, keys = _seed(org, user)
    html = client.get(f"/o/{org.slug}/usage/?split=key").content.decode()
    cost = _series(html, "chart-cost")
    one = f"one ({keys['one'].display})"
    two = f"two ({keys['two'].display})"
    assert set(cost) == {one, two}
    assert cost[one][-3:] == [1_000_000, 0, 11_000_000]
    assert cost[two][-3:] == [3_000_000, 2_000_000, 0]
    assert 'aria-current="true">key</a>' in html
    # The table under the charts has the same numbers.
    table = re.search(r'data-testid="split-table">(.*?)</table>', html, re.S)
    assert table and "$0.011 · 212" in table.group(1)  # today, key one


def test_beyond_six_models_the_rest_is_one_other_series(member_client):
    client, _, org = member_client(Role.OWNER)
    now = timezone.now()
    RequestLog.objects.bulk_create(
        [
            request_log_row(
                organization_id=org.pk,
                save=False,
                created_at=now,
                model=f"m{n}",
                cost_nanos=(n + 1) * 1_000,
            )
            for n in range(9)
        ]
    )
    cost = _series(client.get(f"/o/{org.slug}/usage/").content.decode(), "chart-cost")
    assert list(cost) == ["m8", "m7", "m6", "m5", "m4", "m3", "Other"]
    assert cost["Other"][-1] == 1_000 + 2_000 + 3_000  # m0, m1, m2


def test_axes_have_a_scale_titles_and_today_labelled(member_client):
    client, user, org = member_client(Role.OWNER)
    _seed(org, user)
    html = client.get(f"/o/{org.slug}/usage/").content.decode()
    chart = re.search(r'data-testid="chart-cost">(.*?)</figure>', html, re.S).group(1)
    ticks = re.findall(r'<span style="bottom:([\d.]+)%">([^<]+)</span>', chart)
    # The largest day is $0.011 (today): ticks from $0 past it in round steps.
    assert [t for _, t in ticks] == ["$0.00", "$0.005", "$0.01", "$0.015"]
    assert ticks[0][0] == "0.00" and ticks[-1][0] == "100.00"
    assert '<div class="tchart-ytitle" aria-hidden="true">USD</div>' in chart
    assert "Day (UTC)" in chart
    labels = re.findall(r'<span class="(first|last|)" style="left:[\d.]+%">([^<]+)</span>', chart)
    assert labels[0][0] == "first" and labels[-1] == ("last", "Today")
    assert 'class="tchart-y"' in chart and "Tokens" in html


def test_nice_ticks_and_an_empty_chart():
    assert nice_ticks(0) == [0, 1]
    assert nice_ticks(7) == [0, 2, 4, 6, 8]
    assert nice_ticks(1_000) == [0, 250, 500, 750, 1_000]
    assert nice_ticks(123_456_789)[-1] >= 123_456_789
    from datetime import date

    empty = stacked_bar_chart(
        [date(2026, 3, 1)],
        [],
        title="Nothing",
        y_title="USD",
        tick_label=str,
        caption=str,
    )
    assert 'aria-label="Nothing"' in empty and "03-01" in empty
    one = stacked_bar_chart(
        [date(2026, 3, 1), date(2026, 3, 2)],
        [Series("<b>", [0, 5])],
        title="t",
        y_title="y",
        tick_label=str,
        caption=str,
    )
    assert "&lt;b&gt;" in one and "<b>" not in one  # labels are escaped
