"""Getting started: base URL, snippets in three languages, the model list with prices."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from dashboard import catalog_reads
from dashboard.permissions import OrgContext, org_view
from dashboard.views.common import render_org


@org_view()
def getting_started(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    return render_org(
        request,
        ctx,
        "dashboard/getting_started.html",
        {"base_url": settings.INFRAI_PUBLIC_BASE_URL, "models": catalog_reads.model_prices()},
    )
