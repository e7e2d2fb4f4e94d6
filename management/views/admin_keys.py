"""Admin keys and their audit trail: ``/v1/organization/admin_api_keys[/…]`` (they are created
in the dashboard only)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from accounts.policy import NotAllowed
from config.errors import NotFound, PermissionDenied
from dashboard.permissions import MANAGE_ORG
from management import render
from management.api import ManagementView, api_actor, page, parse_id
from management.models import AdminKey
from management.selectors import admin_key_get, admin_keys_for_organization
from management.services import admin_key_revoke


class AdminKeyList(ManagementView):
    roles = {"GET": MANAGE_ORG}

    def get(self, request: Request) -> Response:
        """The organization's admin keys with their audit trail (created/revoked/last used)."""
        qs = admin_keys_for_organization(organization=self.ctx.organization)
        return page(request, qs, prefix="admin_key_", render=render.admin_key)


class AdminKeyDetail(ManagementView):
    roles = {"GET": MANAGE_ORG, "DELETE": MANAGE_ORG}

    def key(self, key_id: str) -> AdminKey:
        found = admin_key_get(
            organization=self.ctx.organization, admin_key_id=parse_id(key_id, "admin_key_")
        )
        if found is None:
            raise NotFound("No such admin key.")
        return found

    def get(self, request: Request, key_id: str) -> Response:
        return Response(render.admin_key(self.key(key_id)))

    def delete(self, request: Request, key_id: str) -> Response:
        """Revoke an admin key (this one included); effective on its next call. An owner's
        admin key only by an owner (:func:`management.services.admin_key_revoke`)."""
        actor = api_actor(self)
        try:
            key = admin_key_revoke(admin_key=self.key(key_id), actor=actor)
        except NotAllowed as error:
            raise PermissionDenied(error.message) from None
        return Response(
            {
                "object": "organization.admin_api_key.deleted",
                "id": f"admin_key_{key.pk}",
                "deleted": True,
            }
        )
