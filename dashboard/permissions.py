"""Who may do what in an organization: the dashboard and the management API share these rules.

Every organization page goes through :func:`org_view`; every management API view goes through
:func:`role_allows` and :func:`may_edit_member` (``management/views``), so a role can do the same
things over HTTP as in the browser. Pages live under ``/o/<slug>/``. A user who is not a member
gets 404 (another tenant's organization is indistinguishable from a missing one); a member
without the role gets 403.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.models import Membership, Organization, Role, User
from accounts.policy import Actor
from accounts.selectors import organization_for_member

P = ParamSpec("P")

ANY_ROLE = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER, Role.BILLING})
MANAGE_ORG = frozenset({Role.OWNER, Role.ADMIN})
USE_KEYS = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})
SEE_BILLING = frozenset({Role.OWNER, Role.ADMIN, Role.BILLING})


def role_allows(role: Role | str, roles: frozenset[Role]) -> bool:
    """The one permission check: True when ``role`` is one of ``roles``."""
    return role in roles


def may_edit_member(actor: Role | str, target: Role | str) -> bool:
    """Owners edit anyone; admins edit everyone but owners; nobody else edits members."""
    if actor == Role.OWNER:
        return True
    return actor == Role.ADMIN and target != Role.OWNER


def may_grant(actor: Role | str, role: Role | str) -> bool:
    """Who may give (by invitation or role change) ``role``: only an owner makes owners."""
    return role_allows(actor, MANAGE_ORG) and (role != Role.OWNER or actor == Role.OWNER)


@dataclass(frozen=True, slots=True)
class OrgContext:
    """The organization a page is about and the signed-in user's membership of it."""

    organization: Organization
    membership: Membership
    user: User

    @property
    def role(self) -> Role:
        return Role(self.membership.role)

    def can(self, roles: frozenset[Role]) -> bool:
        return role_allows(self.role, roles)

    @property
    def can_manage(self) -> bool:
        return self.can(MANAGE_ORG)

    @property
    def can_use_keys(self) -> bool:
        return self.can(USE_KEYS)

    @property
    def can_see_billing(self) -> bool:
        return self.can(SEE_BILLING)

    @property
    def actor(self) -> Actor:
        """Who acts on this page (for the policy checks and the audit log)."""
        return Actor(user=self.user, role=self.role)


OrgView = Callable[Concatenate[HttpRequest, OrgContext, P], HttpResponse]


def org_view(
    roles: frozenset[Role] = ANY_ROLE,
) -> Callable[[OrgView[P]], Callable[..., HttpResponse]]:
    """Decorate ``view(request, ctx, **kwargs)``: login, verified e-mail, membership, role.

    The URL's ``slug`` is consumed here; the view receives the resolved :class:`OrgContext`.
    """

    def decorate(view: OrgView[P]) -> Callable[..., HttpResponse]:
        @login_required
        @functools.wraps(view)
        def wrapper(
            request: HttpRequest, slug: str, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponse:
            user = request.user
            assert isinstance(user, User)
            if not user.email_verified:
                return redirect("dashboard:verify_pending")
            found = organization_for_member(user=user, slug=slug)
            if found is None:
                raise Http404("No such organization.")
            organization, membership = found
            ctx = OrgContext(organization=organization, membership=membership, user=user)
            if not ctx.can(roles):
                raise PermissionDenied("Your role in this organization does not allow this.")
            request.session["org_slug"] = organization.slug
            return view(request, ctx, *args, **kwargs)

        return wrapper

    return decorate
