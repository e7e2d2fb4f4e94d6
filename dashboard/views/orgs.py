"""Organizations: create, switch, overview, members, invitations."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import twofactor
from accounts.models import Membership, Role, User
from accounts.selectors import (
    invitation_get,
    invitation_get_by_token_hash,
    invitations_pending_for_organization,
    membership_get_by_id,
    memberships_for_organization,
    organizations_for_user,
)
from accounts.services import (
    InvitationError,
    LastOwnerError,
    invitation_accept,
    invitation_create,
    invitation_revoke,
    invitation_token_hash,
    membership_change_role,
    membership_remove,
)
from dashboard import selectors, services
from dashboard.forms import InviteForm, OrganizationForm, RoleForm
from dashboard.permissions import MANAGE_ORG, OrgContext, org_view
from dashboard.views.common import raise_404, render_org
from money.usd import NANOS_PER_CENT

# What the ``slug`` URL converter takes, as long as Organization.slug may be.
_SLUG = re.compile(r"[-a-zA-Z0-9_]{1,64}")


@login_required
def org_create(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    if not request.user.email_verified:
        return redirect("dashboard:verify_pending")
    form = OrganizationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        org = services.organization_create_for(user=request.user, name=form.cleaned_data["name"])
        messages.success(request, f"Created {org.name}.")
        return redirect("dashboard:overview", slug=org.slug)
    orgs = organizations_for_user(user=request.user)
    return render(request, "dashboard/org_create.html", {"form": form, "organizations": orgs})


@login_required
def org_switch(request: HttpRequest) -> HttpResponse:
    """The switcher's target: go to the chosen organization (membership checked there); a
    value that cannot be a slug goes home, as no choice does."""
    slug = request.GET.get("org", "")
    if _SLUG.fullmatch(slug) is None:
        return redirect("dashboard:home")
    return redirect("dashboard:overview", slug=slug)


@org_view()
def overview(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    summary = selectors.overview_summary(organization=ctx.organization)
    balance = (
        selectors.wallet_summary(organization=ctx.organization).balance_nanos
        if ctx.can_see_billing
        else None
    )
    needs_credit = (
        selectors.wallet_summary(organization=ctx.organization).available_nanos < NANOS_PER_CENT
    )
    return render_org(
        request,
        ctx,
        "dashboard/overview.html",
        {
            "summary": summary,
            "balance": balance,
            "needs_credit": needs_credit,
            # Owners are offered two-factor authentication until they turn it on.
            "offer_2fa": ctx.role == Role.OWNER and not twofactor.enabled(user=ctx.user),
        },
    )


def _may_edit(ctx: OrgContext, target: Membership) -> bool:
    """Owners edit anyone; admins edit everyone but owners; nobody else edits."""
    if ctx.role == Role.OWNER:
        return True
    return ctx.role == Role.ADMIN and target.role != Role.OWNER


@org_view()
def members(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    allow_owner = ctx.role == Role.OWNER
    form = InviteForm(allow_owner=allow_owner)
    rows = [
        (m, _may_edit(ctx, m), RoleForm(initial={"role": m.role}, allow_owner=allow_owner))
        for m in memberships_for_organization(organization=ctx.organization)
    ]
    invitations = (
        invitations_pending_for_organization(organization=ctx.organization)
        if ctx.can_manage
        else []
    )
    return render_org(
        request,
        ctx,
        "dashboard/members.html",
        {"rows": rows, "invite_form": form, "invitations": invitations},
    )


@org_view(MANAGE_ORG)
@require_POST
def member_invite(request: HttpRequest, ctx: OrgContext) -> HttpResponse:
    form = InviteForm(request.POST, allow_owner=ctx.role == Role.OWNER)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, str(error))
        return redirect("dashboard:members", slug=ctx.organization.slug)
    invitation, token = invitation_create(
        organization=ctx.organization,
        email=form.cleaned_data["email"],
        role=form.cleaned_data["role"],
        invited_by=ctx.user,
        actor=ctx.actor,
    )
    url = request.build_absolute_uri(reverse("dashboard:invitation_accept", args=[token]))
    transaction.on_commit(
        lambda: services.invitation_email_send(invitation=invitation, accept_url=url)
    )
    messages.success(request, f"Invitation sent to {invitation.email}.")
    return redirect("dashboard:members", slug=ctx.organization.slug)


@org_view(MANAGE_ORG)
@require_POST
def invitation_cancel(request: HttpRequest, ctx: OrgContext, invitation_id: int) -> HttpResponse:
    invitation = invitation_get(organization=ctx.organization, invitation_id=invitation_id)
    if invitation is None:
        raise_404()
    invitation_revoke(invitation=invitation, actor=ctx.actor)
    messages.success(request, f"Invitation to {invitation.email} revoked.")
    return redirect("dashboard:members", slug=ctx.organization.slug)


def _editable_member(ctx: OrgContext, membership_id: int) -> Membership:
    target = membership_get_by_id(organization=ctx.organization, membership_id=membership_id)
    if target is None:
        raise_404()
    if not _may_edit(ctx, target):
        raise PermissionDenied("Only an owner can change an owner.")
    return target


@org_view(MANAGE_ORG)
@require_POST
def member_role(request: HttpRequest, ctx: OrgContext, membership_id: int) -> HttpResponse:
    target = _editable_member(ctx, membership_id)
    form = RoleForm(request.POST, allow_owner=ctx.role == Role.OWNER)
    if not form.is_valid():
        messages.error(request, "Choose one of the listed roles.")
    else:
        try:
            membership_change_role(
                membership=target, role=form.cleaned_data["role"], actor=ctx.actor
            )
            messages.success(request, f"{target.user.email} is now {form.cleaned_data['role']}.")
        except LastOwnerError as error:
            messages.error(request, str(error))
    return redirect("dashboard:members", slug=ctx.organization.slug)


@org_view(MANAGE_ORG)
@require_POST
def member_remove(request: HttpRequest, ctx: OrgContext, membership_id: int) -> HttpResponse:
    target = _editable_member(ctx, membership_id)
    try:
        membership_remove(membership=target, actor=ctx.actor)
    except LastOwnerError as error:
        messages.error(request, str(error))
        return redirect("dashboard:members", slug=ctx.organization.slug)
    messages.success(request, f"Removed {target.user.email}.")
    if target.user_id == ctx.user.pk:
        return redirect("dashboard:home")
    return redirect("dashboard:members", slug=ctx.organization.slug)


@login_required
def invitation_accept_view(request: HttpRequest, token: str) -> HttpResponse:
    """Show an invitation; POST accepts it for the signed-in, verified, invited address."""
    assert isinstance(request.user, User)
    invitation = invitation_get_by_token_hash(token_hash=invitation_token_hash(token))
    if invitation is None or not invitation.is_pending:
        return render(request, "dashboard/invitation.html", {"invalid": True}, status=404)
    error = ""
    if request.method == "POST":
        try:
            invitation_accept(invitation=invitation, user=request.user)
        except InvitationError as exc:
            error = str(exc)
        else:
            messages.success(request, f"You joined {invitation.organization.name}.")
            return redirect("dashboard:overview", slug=invitation.organization.slug)
    return render(request, "dashboard/invitation.html", {"invitation": invitation, "error": error})
