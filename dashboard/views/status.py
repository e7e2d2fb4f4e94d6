"""Model status: health, latency and success rate per model and vendor (platform-wide)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from dashboard import selectors
from dashboard.permissions import OrgContext, org_view
from dashboard.views.common import render_org


@org_view()
def model_status(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Platform-wide model and vendor health, the same for every member of every organization
    (no other organization's counts: see :func:`dashboard.selectors.model_status`)."""
    return render_org(
        request,
        ctx,
        "dashboard/model_status.html",
        {
            "status": selectors.model_status(),
            "min_calls": selectors.STATUS_MIN_CALLS,
            "threshold": settings.INFRAI_CIRCUIT_FAILURE_THRESHOLD,
            "cooldown": settings.INFRAI_CIRCUIT_COOLDOWN_S,
        },
    )
