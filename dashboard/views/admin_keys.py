"""Admin keys (management API credentials): list with their audit trail, create, revoke.

One page, owners and admins only. Creating shows the full key once (``no-store``); a key acts
with its creator's role (see :mod:`management.auth`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from dashboard.permissions import MANAGE_ORG, OrgContext, org_view
from dashboard.views.common import no_store, raise_404, render_org
from management.models import AdminKey
from management.services import admin_key_create, admin_key_revoke


@org_view(MANAGE_ORG)
def admin_keys(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """GET: the keys; POST ``name``: create one (shown once); POST ``revoke``: revoke one."""
    if request.method == "POST":
        revoke = request.POST.get("revoke", "")
        if revoke:
            found = AdminKey.objects.filter(
                organization=ctx.organization, pk=int(revoke) if revoke.isdigit() else 0
            ).first()
            if found is None:
                raise_404()
            admin_key_revoke(admin_key=found, revoked_by=ctx.user)
            messages.success(request, f"Revoked {found.display}. Calls with it now fail with 401.")
            return redirect("dashboard:admin_keys", slug=ctx.organization.slug)
        name = request.POST.get("name", "").strip()[:100]
        admin_key, raw = admin_key_create(
            organization=ctx.organization, created_by=ctx.user, name=name
        )
        base = settings.INFRAI_PUBLIC_BASE_URL.rstrip("/")
        page = render_org(
            request,
            ctx,
            "dashboard/admin_keys.html",
            {"keys": _keys(ctx), "created": admin_key, "raw_key": raw, "base_url": base},
        )
        return no_store(page)
    return render_org(request, ctx, "dashboard/admin_keys.html", {"keys": _keys(ctx)})


def _keys(ctx: OrgContext) -> list[AdminKey]:
    return list(
        AdminKey.objects.filter(organization=ctx.organization)
        .select_related("created_by", "revoked_by")
        .order_by("-created_at")
    )
