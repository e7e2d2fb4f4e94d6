"""Usage: plots per day/model/project/key over a date range; the request log and its detail."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.utils.http import urlencode

from accounts.selectors import api_keys_for_organization
from dashboard import selectors
from dashboard.charts import Bar, bar_chart_svg
from dashboard.forms import DateRangeForm, LogFilterForm
from dashboard.permissions import OrgContext, org_view
from dashboard.selectors import Dimension, LogFilters, day_bounds
from dashboard.templatetags.dashboard import usd
from dashboard.views.common import raise_404, render_org
from inference.models import RequestStatus

LOG_PAGE = 50
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
    days = selectors.usage_by_day(organization_id=org_id, start=start, end=end)
    breakdowns = {
        title: selectors.usage_by(organization_id=org_id, dimension=dim, start=lo, end=hi)
        for title, dim in BREAKDOWNS
    }
    totals = selectors.usage_totals(organization_id=org_id, start=lo, end=hi)
    cost_chart = bar_chart_svg(
        [Bar(d.label, d.cost_nanos, usd(d.cost_nanos)) for d in days],
        title=f"Cost per day, {start} to {end}",
    )
    token_chart = bar_chart_svg(
        [Bar(d.label, d.tokens, f"{d.tokens:,} tokens") for d in days],
        title=f"Tokens per day, {start} to {end}",
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
            "latest": selectors.request_log(
                organization_id=org_id, start=lo, end=hi, filters=LogFilters(), limit=10
            ),
        },
    )


@org_view()
def request_log(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    keys = api_keys_for_organization(organization=ctx.organization)
    form = LogFilterForm(request.GET or None, keys=keys, statuses=RequestStatus.choices)
    start, end = form.range()
    lo, hi = day_bounds(start, end)
    data = form.cleaned_data if form.is_valid() else {}
    filters = LogFilters(
        status=data.get("status") or "",
        model=data.get("model") or "",
        vendor=data.get("vendor") or "",
        api_key_id=data.get("key"),
    )
    rows = selectors.request_log(
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
    choices = selectors.log_filter_choices(organization_id=ctx.organization.pk, start=lo, end=hi)
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
        },
    )


@org_view()
def request_detail(request: HttpRequest, ctx: OrgContext, request_id: str) -> HttpResponse:
    row = selectors.request_log_get(organization_id=ctx.organization.pk, request_id=request_id)
    if row is None:
        raise_404()
    routing_json = json.dumps(row.routing, indent=2, sort_keys=True)
    return render_org(
        request, ctx, "dashboard/request_detail.html", {"row": row, "routing_json": routing_json}
    )
