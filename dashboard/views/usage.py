"""Usage: plots per day/model/project/key over a date range; the request log and its detail."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils import timezone
from django.utils.http import urlencode

from accounts.selectors import api_keys_for_organization
from dashboard import exports
from dashboard.charts import Series, compact_tokens, stacked_bar_chart
from dashboard.forms import DateRangeForm, LogFilterForm
from dashboard.permissions import OrgContext, org_view
from dashboard.templatetags.dashboard import usd
from dashboard.views.common import raise_404, render_org
from inference import selectors as calls
from inference.selectors import Dimension, LogFilters, day_bounds

LOG_PAGE = 50
#: Series a usage chart stacks (the top models or keys by cost); the rest is one "Other".
CHART_SERIES = 6
BREAKDOWNS: tuple[tuple[str, Dimension], ...] = (
    ("By model", "model"),
    ("By project", "project"),
    ("By key", "key"),
)


@org_view()
def usage(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    form = DateRangeForm(request.GET or None)
    start, end = form.range()
    lo, hi = day_bounds(start, end)
    org_id = ctx.organization.pk
    breakdowns = {
        title: calls.usage_by(organization_id=org_id, dimension=dim, start=lo, end=hi)
        for title, dim in BREAKDOWNS
    }
    totals = calls.usage_totals(organization_id=org_id, start=lo, end=hi)
    split: Dimension = "key" if request.GET.get("split") == "key" else "model"
    top = breakdowns["By key" if split == "key" else "By model"][:CHART_SERIES]
    chart_days, split_series = calls.usage_by_day_split(
        organization_id=org_id,
        dimension=split,
        start=start,
        end=end,
        named=[(r.value, r.label) for r in top],
    )
    days = calls.day_totals(chart_days, split_series)  # the daily table, from the same query
    today = timezone.now().date()
    cost_chart = stacked_bar_chart(
        chart_days,
        [Series(s.label, s.cost_nanos, other=s.value is None) for s in split_series],
        title=f"Cost per day by {split}, {start} to {end}",
        y_title="USD",
        tick_label=usd,
        caption=usd,
        today=today,
        testid="chart-cost",
    )
    token_chart = stacked_bar_chart(
        chart_days,
        [Series(s.label, s.tokens, other=s.value is None) for s in split_series],
        title=f"Tokens per day by {split}, {start} to {end}",
        y_title="Tokens",
        tick_label=compact_tokens,
        caption=lambda n: f"{n:,} tokens",
        today=today,
        testid="chart-tokens",
    )
    return render_org(
        request,
        ctx,
        "dashboard/usage.html",
        {
            "form": form,
            "start": start,
            "end": end,
            "days": days,
            "totals": totals,
            "breakdowns": breakdowns,
            "cost_chart": cost_chart,
            "token_chart": token_chart,
            "split": split,
            "split_series": split_series,
            "split_rows": [
                (day, [(s.cost_nanos[i], s.tokens[i]) for s in split_series])
                for i, day in enumerate(chart_days)
            ],
            "latest": calls.request_log(
                organization_id=org_id, start=lo, end=hi, filters=LogFilters(), limit=10
            ),
        },
    )


def _log_filters(
    request: HttpRequest, ctx: OrgContext
) -> tuple[LogFilterForm, LogFilters, dict[str, Any]]:
    keys = api_keys_for_organization(organization=ctx.organization)
    form = LogFilterForm(request.GET or None, keys=keys, statuses=calls.STATUS_FILTER_CHOICES)
    data = form.cleaned_data if form.is_valid() else {}
    filters = LogFilters(
        status=data.get("status") or "",
        model=data.get("model") or "",
        vendor=data.get("vendor") or "",
        api_key_id=data.get("key"),
    )
    return form, filters, data


@org_view()
def request_log(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    form, filters, data = _log_filters(request, ctx)
    start, end = form.range()
    lo, hi = day_bounds(start, end)
    rows = calls.request_log(
        organization_id=ctx.organization.pk,
        start=lo,
        end=hi,
        filters=filters,
        before_id=data.get("before"),
        limit=LOG_PAGE + 1,
    )
    next_url = ""
    if len(rows) > LOG_PAGE:
        rows = rows[:LOG_PAGE]
        params = {k: request.GET.get(k, "") for k in request.GET if k != "before"}
        params["before"] = str(rows[-1].pk)
        next_url = "?" + urlencode(params)
    choices = calls.log_filter_choices(organization_id=ctx.organization.pk, start=lo, end=hi)
    return render_org(
        request,
        ctx,
        "dashboard/request_log.html",
        {
            "form": form,
            "rows": rows,
            "next_url": next_url,
            "choices": choices,
            "filtered": any([filters.status, filters.model, filters.vendor, filters.api_key_id]),
            "export_query": urlencode(
                {k: request.GET.get(k, "") for k in request.GET if k != "before"}
            ),
        },
    )


@org_view()  # type: ignore[arg-type]  # org_view is typed for HttpResponse; this one streams
def request_log_export(request: HttpRequest, ctx: OrgContext) -> StreamingHttpResponse:
    """The request log with the page's filters as a CSV download (newest first)."""
    form, filters, _ = _log_filters(request, ctx)
    start, end = form.range()
    lo, hi = day_bounds(start, end)
    response = StreamingHttpResponse(
        exports.request_log_csv(
            organization_id=ctx.organization.pk, start=lo, end=hi, filters=filters
        ),
        content_type="text/csv",
    )
    name = f"infrai-requests-{ctx.organization.slug}-{start}-{end}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


USAGE_EXPORT_BY: dict[str, Dimension | None] = {
    "day": None,
    "model": "model",
    "vendor": "vendor",
    "project": "project",
    "key": "key",
}


@org_view()
def usage_export(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """``?start&end&by=day|model|vendor|project|key`` → usage of the range as CSV."""
    form = DateRangeForm(request.GET or None)
    start, end = form.range()
    by_name = request.GET.get("by", "day")
    by = USAGE_EXPORT_BY.get(by_name)
    if by_name not in USAGE_EXPORT_BY:
        by_name, by = "day", None
    body = exports.usage_csv(organization_id=ctx.organization.pk, start=start, end=end, by=by)
    response = HttpResponse(body, content_type="text/csv")
    name = f"infrai-usage-by-{by_name}-{ctx.organization.slug}-{start}-{end}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@org_view()
def request_detail(request: HttpRequest, ctx: OrgContext, request_id: str) -> HttpResponse:
    row = calls.request_log_get(organization_id=ctx.organization.pk, request_id=request_id)
    if row is None:
        raise_404()
    routing_json = json.dumps(row.routing, indent=2, sort_keys=True)
    return render_org(
        request, ctx, "dashboard/request_detail.html", {"row": row, "routing_json": routing_json}
    )
