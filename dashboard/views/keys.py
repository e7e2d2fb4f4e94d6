"""API keys: list, create (the full key shown once), rename, expiry, revoke.

Creation is post/redirect/get: the POST creates the key and parks the full key in the session
under the key's id; the redirected GET shows it and removes it from the session, so a reload
(or the back button) shows it never again and never creates another key.

Every write goes through the services the management API uses (``api_key_issue``,
``api_key_change``, ``api_key_revoke_as``), so the rules of :mod:`accounts.policy` hold here
too: a member's key gets the members' limits (a budget included); changing or revoking a key
someone else created needs an owner or admin, and an owner's key needs an owner.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from accounts.policy import Actor, KeyLimits, NotAllowed
from accounts.selectors import api_key_get, api_keys_for_organization, projects_for_organization
from accounts.services import api_key_change, api_key_issue, api_key_revoke_as
from billing import selectors as billing_selectors
from dashboard.forms import ApiKeyCreateForm, ApiKeyEditForm
from dashboard.permissions import USE_KEYS, OrgContext, org_view
from dashboard.views.common import no_store, raise_404, render_org
from money.usd import NANOS_PER_USD

if TYPE_CHECKING:
    from accounts.models import ApiKey


def _list_page(
    request: HttpRequest, ctx: OrgContext, form: ApiKeyCreateForm | None, *, status: int = 200
) -> HttpResponse:
    projects = projects_for_organization(organization=ctx.organization)
    return render_org(
        request,
        ctx,
        "dashboard/keys.html",
        {
            "keys": api_keys_for_organization(organization=ctx.organization).select_related(
                "created_by"
            ),
            "form": form or ApiKeyCreateForm(projects=projects),
            "has_projects": projects.exists(),
            "now": timezone.now(),
        },
        status=status,
    )


@org_view()
def key_list(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """The keys (never their secret part); members who may also see the create form."""
    return _list_page(request, ctx, None)


@org_view(USE_KEYS)
@require_POST
def key_create(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    """Create a key, then redirect to the page that shows it once."""
    projects = projects_for_organization(organization=ctx.organization)
    form = ApiKeyCreateForm(request.POST, projects=projects)
    if not form.is_valid():
        return _list_page(request, ctx, form, status=400)
    try:
        api_key, raw = api_key_issue(
            actor=_actor(ctx),
            project=form.cleaned_data["project"],
            name=form.cleaned_data["name"],
            expires_at=form.expires_at,
        )
    except NotAllowed as error:
        raise PermissionDenied(error.message) from None
    request.session[_once_slot(api_key.pk)] = raw
    return redirect("dashboard:key_created", slug=ctx.organization.slug, key_id=api_key.pk)


def _actor(ctx: OrgContext) -> Actor:
    return Actor(user=ctx.user, role=ctx.role)


def _api_key(ctx: OrgContext, key_id: int) -> ApiKey:
    """The organization's key with that id; 404 for a missing one and another tenant's alike."""
    api_key = api_key_get(organization=ctx.organization, key_id=key_id)
    if api_key is None:
        raise_404()
    return api_key


def _once_slot(key_id: int) -> str:
    return f"dashboard.new-key.{key_id}"


@org_view(USE_KEYS)
def key_created(request: HttpRequest, ctx: OrgContext, key_id: int) -> HttpResponse:
    """Show a just-created key once (taken out of the session); a reload goes to the list."""
    api_key = _api_key(ctx, key_id)
    raw = request.session.pop(_once_slot(key_id), None)
    if raw is None:
        messages.info(
            request,
            f"The full key {api_key.display} was shown once and cannot be shown again. "
            "If you lost it, revoke it and create another.",
        )
        return redirect("dashboard:keys", slug=ctx.organization.slug)
    page = render_org(
        request,
        ctx,
        "dashboard/key_created.html",
        {"api_key": api_key, "raw_key": raw, "base_url": settings.INFRAI_PUBLIC_BASE_URL},
    )
    return no_store(page)


@org_view(USE_KEYS)
def key_edit(request: HttpRequest, ctx: OrgContext, key_id: int) -> HttpResponse:
    """Name, expiry, rate limits and monthly budget of a key, with its spend this month. A
    limit refused by the rules of :mod:`accounts.policy` (a member raising a limit) comes back
    on its field with the API's text (400); a key the user may not change at all is 403."""
    api_key = _api_key(ctx, key_id)
    budget = api_key.monthly_budget_nanos
    initial = {
        "name": api_key.name,
        "expires_on": api_key.expires_at.date() if api_key.expires_at else None,
        "requests_per_minute": api_key.requests_per_minute,
        "tokens_per_minute": api_key.tokens_per_minute,
        "monthly_budget_usd": None if budget is None else Decimal(budget) / NANOS_PER_USD,
    }
    form = ApiKeyEditForm(request.POST or None, initial=initial)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                api_key_change(
                    actor=_actor(ctx),
                    api_key=api_key,
                    name=form.cleaned_data["name"],
                    expires_at=form.expires_at,
                    limits=form.limits(
                        KeyLimits(
                            requests_per_minute=api_key.requests_per_minute,
                            tokens_per_minute=api_key.tokens_per_minute,
                            monthly_budget_nanos=api_key.monthly_budget_nanos,
                        )
                    ),
                )
            except NotAllowed as error:
                if error.param is None:
                    raise PermissionDenied(error.message) from None
                form.add_error(error.param, error.message)
                api_key.refresh_from_db()
            else:
                messages.success(request, f"Saved key {api_key.display}.")
                return redirect("dashboard:keys", slug=ctx.organization.slug)
    context = {
        "api_key": api_key,
        "form": form,
        "spent_nanos": billing_selectors.key_month_spend(api_key_id=api_key.pk),
    }
    return render_org(request, ctx, "dashboard/key_edit.html", context, status=status)


@org_view(USE_KEYS)
@require_POST
def key_revoke(request: HttpRequest, ctx: OrgContext, key_id: int) -> HttpResponse:
    api_key = _api_key(ctx, key_id)
    try:
        api_key_revoke_as(actor=_actor(ctx), api_key=api_key)
    except NotAllowed as error:
        raise PermissionDenied(error.message) from None
    messages.success(request, f"Revoked {api_key.display}. Calls with it now fail with 401.")
    return redirect("dashboard:keys", slug=ctx.organization.slug)
