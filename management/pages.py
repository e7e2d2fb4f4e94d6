"""The dashboard's admin-keys page (``/o/<slug>/admin-keys/``): the organization's management
API keys with their audit trail; create one, revoke one.

A dashboard page that lives here because it reads and writes :class:`~management.models.AdminKey`
and the management app sits above the dashboard. :mod:`config.urls` serves :data:`urlpatterns`
beside the dashboard's own pages, in the same ``dashboard`` namespace. Owners and admins only;
creating shows the full key once (``no-store``); a key acts with its creator's role (see
:mod:`management.auth`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import URLPattern, path

from accounts.policy import Actor, NotAllowed
from dashboard.permissions import MANAGE_ORG, OrgContext, org_view
from dashboard.views.common import no_store, raise_404, render_org
from management.models import AdminKey
from management.selectors import admin_key_get, admin_keys_for_organization
from management.services import admin_key_create, admin_key_revoke

TEMPLATE = "dashboard/admin_keys.html"


@org_view(MANAGE_ORG)
def admin_keys(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """GET: the keys; POST ``name``: create one (shown once); POST ``revoke``: revoke one."""
    if request.method == "POST":
        revoke = request.POST.get("revoke", "")
        if revoke:
            return _revoke(request, ctx, revoke)
        name = request.POST.get("name", "").strip()[:100]
        admin_key, raw = admin_key_create(
            organization=ctx.organization, created_by=ctx.user, name=name
        )
        base = settings.INFRAI_PUBLIC_BASE_URL.rstrip("/")
        context = {"keys": _keys(ctx), "created": admin_key, "raw_key": raw, "base_url": base}
        return no_store(render_org(request, ctx, TEMPLATE, context))
    return render_org(request, ctx, TEMPLATE, {"keys": _keys(ctx)})


def _revoke(request: HttpRequest, ctx: OrgContext, revoke: str) -> HttpResponse:
    """Revoke the organization's key with the id ``revoke`` (404 for any other) and go back to
    the list."""
    found = admin_key_get(
        organization=ctx.organization, admin_key_id=int(revoke) if revoke.isdigit() else 0
    )
    if found is None:
        raise_404()
    try:
        admin_key_revoke(admin_key=found, actor=Actor(user=ctx.user, role=ctx.role))
    except NotAllowed as error:
        raise PermissionDenied(error.message) from None
    messages.success(request, f"Revoked {found.display}. Calls with it now fail with 401.")
    return redirect("dashboard:admin_keys", slug=ctx.organization.slug)


def _keys(ctx: OrgContext) -> list[AdminKey]:
    return list(admin_keys_for_organization(organization=ctx.organization))


urlpatterns: list[URLPattern] = [path("o/<slug:slug>/admin-keys/", admin_keys, name="admin_keys")]
