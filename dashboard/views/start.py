"""Getting started: base URL, snippets in three languages, the model list with prices."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from dashboard import selectors
from dashboard.permissions import OrgContext, org_view
from dashboard.views.common import render_org
from money.usd import NANOS_PER_CENT

# Below this available balance a call cannot be paid for (its hold is refused with 402):
# getting-started and the overview then show "add credit" as a step.
LOW_BALANCE_NANOS = NANOS_PER_CENT


def needs_credit(*, ctx: OrgContext) -> bool:
    """Whether the organization's available balance cannot cover a call."""
    summary = selectors.wallet_summary(organization=ctx.organization)
    return summary.available_nanos < LOW_BALANCE_NANOS


@org_view()
def getting_started(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    overview = selectors.overview_summary(organization=ctx.organization)
    return render_org(
        request,
        ctx,
        "dashboard/getting_started.html",
        {
            "base_url": settings.INFRAI_PUBLIC_BASE_URL,
            "models": selectors.model_prices(),
            "needs_credit": needs_credit(ctx=ctx),
            "has_key": overview.active_key_count > 0,
            "has_project": overview.project_count > 0,
        },
    )
