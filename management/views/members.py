"""Members and invitations: ``/v1/organization/users`` and ``/v1/organization/invites``.

The rules are the dashboard's (:mod:`dashboard.permissions`): owners and admins manage
members; admins never edit owners; only owners make owners; the last owner stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction
from django.urls import reverse
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import (
    invitation_get,
    invitations_for_organization,
    membership_get_by_user_id,
    memberships_for_organization,
)
from accounts.services import (
    LastOwnerError,
    invitation_create,
    invitation_revoke,
    membership_change_role,
    membership_remove,
)
from config.errors import InvalidRequest, NotFound, PermissionDenied
from dashboard import services as dashboard_services
from dashboard.permissions import MANAGE_ORG, may_edit_member, may_grant
from management import render
from management.api import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ManagementView,
    api_actor,
    int_param,
    list_response,
    page,
    parse_id,
)
from management.serializers import InviteCreate, RoleChange

if TYPE_CHECKING:
    from accounts.models import Invitation, Membership


class UserList(ManagementView):
    def get(self, request: Request) -> Response:
        """Members by user id (the id they are exposed by, so ``after`` is a ``user_…`` id)."""
        limit = int_param(request, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT)
        assert limit is not None
        qs = memberships_for_organization(organization=self.ctx.organization)
        after = request.query_params.get("after")
        if after:
            qs = qs.filter(user_id__gt=parse_id(after, "user_", param="after"))
        rows = list(qs.order_by("user_id")[: limit + 1])
        return list_response([render.member(m) for m in rows[:limit]], has_more=len(rows) > limit)


class UserDetail(ManagementView):
    roles = {"POST": MANAGE_ORG, "DELETE": MANAGE_ORG}
    bodies = {"POST": RoleChange}

    def membership(self, user_id: str) -> Membership:
        found = membership_get_by_user_id(
            organization=self.ctx.organization, user_id=parse_id(user_id, "user_")
        )
        if found is None:
            raise NotFound("No such user in this organization.")
        return found

    def editable(self, user_id: str) -> Membership:
        target = self.membership(user_id)
        if not may_edit_member(self.ctx.role, target.role):
            raise PermissionDenied("Only an owner can change an owner.")
        return target

    def get(self, request: Request, user_id: str) -> Response:
        return Response(render.member(self.membership(user_id)))

    def post(self, request: Request, user_id: str) -> Response:
        """Change the member's role."""
        target = self.editable(user_id)
        body = RoleChange(data=request.data)
        body.is_valid(raise_exception=True)
        role = body.validated_data["role"]
        if not may_grant(self.ctx.role, role):
            raise PermissionDenied("Only an owner can make an owner.")
        try:
            changed = membership_change_role(membership=target, role=role, actor=api_actor(self))
        except LastOwnerError as error:
            raise InvalidRequest(str(error), code="last_owner", param="role") from None
        changed.user = target.user
        return Response(render.member(changed))

    def delete(self, request: Request, user_id: str) -> Response:
        """Remove the member from the organization."""
        target = self.editable(user_id)
        try:
            membership_remove(membership=target, actor=api_actor(self))
        except LastOwnerError as error:
            raise InvalidRequest(str(error), code="last_owner") from None
        return Response(
            {"object": "organization.user.deleted", "id": f"user_{target.user_id}", "deleted": True}
        )


class InviteList(ManagementView):
    roles = {"GET": MANAGE_ORG, "POST": MANAGE_ORG}
    bodies = {"POST": InviteCreate}

    def get(self, request: Request) -> Response:
        qs = invitations_for_organization(organization=self.ctx.organization)
        return page(request, qs, prefix="invite_", render=render.invitation)

    def post(self, request: Request) -> Response:
        """Invite by e-mail (the link is mailed after commit, as from the dashboard)."""
        body = InviteCreate(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if not may_grant(self.ctx.role, data["role"]):
            raise PermissionDenied("Only an owner can invite an owner.")
        with transaction.atomic():
            invitation, token = invitation_create(
                organization=self.ctx.organization,
                email=data["email"],
                role=data["role"],
                invited_by=self.ctx.admin_key.created_by,
                actor=api_actor(self),
            )
            url = request.build_absolute_uri(reverse("dashboard:invitation_accept", args=[token]))
            transaction.on_commit(
                lambda: dashboard_services.invitation_email_send(
                    invitation=invitation, accept_url=url
                )
            )
        return Response(render.invitation(invitation), status=201)


class InviteDetail(ManagementView):
    roles = {"GET": MANAGE_ORG, "DELETE": MANAGE_ORG}

    def invitation(self, invite_id: str) -> Invitation:
        found = invitation_get(
            organization=self.ctx.organization, invitation_id=parse_id(invite_id, "invite_")
        )
        if found is None:
            raise NotFound("No such invitation.")
        return found

    def get(self, request: Request, invite_id: str) -> Response:
        return Response(render.invitation(self.invitation(invite_id)))

    def delete(self, request: Request, invite_id: str) -> Response:
        """Revoke the invitation: its link stops working."""
        invitation = invitation_revoke(invitation=self.invitation(invite_id), actor=api_actor(self))
        return Response(
            {
                "object": "organization.invite.deleted",
                "id": f"invite_{invitation.pk}",
                "deleted": True,
            }
        )
