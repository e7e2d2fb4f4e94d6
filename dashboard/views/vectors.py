"""The vector store page: the organization's collections with their size and cost."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from dashboard.permissions import OrgContext, org_view
from dashboard.views.common import render_org
from infra.querystring import query_id
from vectors.selectors import collections_for_organization


@org_view()
def vector_collections(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Every collection of the organization's projects (``?project=<id>``: one project's)."""
    project_id = query_id(request.GET.get("project", ""))
    rows = collections_for_organization(organization_id=ctx.organization.pk, project_id=project_id)
    return render_org(
        request,
        ctx,
        "dashboard/vectors.html",
        {
            "collections": rows,
            "total_bytes": sum(r.size_bytes for r in rows),
            "total_nanos": sum(r.charged_nanos for r in rows),
        },
    )
