"""Projects and their API keys: ``/v1/organization/projects[/…/api_keys]``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.policy import Actor, KeyLimits, NotAllowed
from accounts.selectors import (
    api_key_get,
    api_keys_for_project,
    project_get,
    projects_for_organization,
)
from accounts.services import (
    DEFAULT,
    api_key_change,
    api_key_issue,
    api_key_revoke_as,
    project_archive,
    project_create,
    project_update,
)
from config.errors import InvalidRequest, NotFound, PermissionDenied
from dashboard.permissions import MANAGE_ORG, USE_KEYS
from management import render
from management.api import ManagementView, api_actor, page, parse_id
from management.serializers import ApiKeyWrite, ProjectCreate, ProjectUpdate

if TYPE_CHECKING:
    from accounts.models import ApiKey, Project


class _ProjectScoped(ManagementView):
    def project(self, project_id: str) -> Project:
        found = project_get(
            organization=self.ctx.organization, project_id=parse_id(project_id, "proj_")
        )
        if found is None:
            raise NotFound("No such project.")
        return found


def _duplicate_name(name: str) -> InvalidRequest:
    return InvalidRequest(
        f"A project named '{name}' already exists.", code="duplicate_name", param="name"
    )


class ProjectList(ManagementView):
    roles = {"POST": MANAGE_ORG}
    bodies = {"POST": ProjectCreate}

    def get(self, request: Request) -> Response:
        qs = projects_for_organization(
            organization=self.ctx.organization,
            include_archived=request.query_params.get("include_archived") in ("true", "1"),
        )
        return page(request, qs, prefix="proj_", render=render.project)

    def post(self, request: Request) -> Response:
        body = ProjectCreate(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            created = project_create(
                organization=self.ctx.organization,
                name=data["name"],
                monthly_budget_nanos=data.get("monthly_budget_usd"),
                actor=_actor(self),
            )
        except IntegrityError:
            raise _duplicate_name(data["name"]) from None
        return Response(render.project(created), status=201)


class ProjectDetail(_ProjectScoped):
    roles = {"POST": MANAGE_ORG}
    bodies = {"POST": ProjectUpdate}

    def get(self, request: Request, project_id: str) -> Response:
        return Response(render.project(self.project(project_id)))

    def post(self, request: Request, project_id: str) -> Response:
        """Rename and/or set the monthly budget (``null`` clears it)."""
        found = self.project(project_id)
        body = ProjectUpdate(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        name = data.get("name", found.name)
        budget = data.get("monthly_budget_usd", found.monthly_budget_nanos)
        try:
            updated = project_update(
                project=found, name=name, monthly_budget_nanos=budget, actor=_actor(self)
            )
        except IntegrityError:
            raise _duplicate_name(name) from None
        return Response(render.project(updated))


class ProjectArchive(_ProjectScoped):
    roles = {"POST": MANAGE_ORG}

    def post(self, request: Request, project_id: str) -> Response:
        """Archive: the project's keys stop working at once."""
        return Response(
            render.project(project_archive(project=self.project(project_id), actor=_actor(self)))
        )


def _expiry(data: dict[str, Any], current: datetime | None) -> datetime | None:
    if "expires_at" not in data:
        return current
    value = data["expires_at"]
    return None if value is None else datetime.fromtimestamp(value, tz=UTC)


def _actor(view: ManagementView) -> Actor:
    """The person behind the admin key, acting with the key's effective role."""
    return api_actor(view)


def _refused(error: NotAllowed) -> PermissionDenied:
    return PermissionDenied(error.message, param=error.param)


class ApiKeyList(_ProjectScoped):
    roles = {"POST": USE_KEYS}
    bodies = {"POST": ApiKeyWrite}

    def get(self, request: Request, project_id: str) -> Response:
        found = self.project(project_id)
        qs = api_keys_for_project(organization=self.ctx.organization, project=found)
        return page(request, qs, prefix="key_", render=render.api_key)

    def post(self, request: Request, project_id: str) -> Response:
        """Create a key; the response is the only time ``value`` (the secret) is shown."""
        found = self.project(project_id)
        if found.archived_at is not None:
            raise InvalidRequest("The project is archived.", code="project_archived")
        body = ApiKeyWrite(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            created, raw = api_key_issue(
                actor=_actor(self),
                project=found,
                name=data.get("name", ""),
                expires_at=_expiry(data, None),
                requests_per_minute=data.get("requests_per_minute", DEFAULT),
                tokens_per_minute=data.get("tokens_per_minute", DEFAULT),
                monthly_budget_nanos=data.get("monthly_budget_usd", DEFAULT),
            )
        except NotAllowed as error:
            raise _refused(error) from None
        response = Response(render.api_key(created, secret=raw), status=201)
        response["Cache-Control"] = "no-store"
        return response


class ApiKeyDetail(_ProjectScoped):
    roles = {"POST": USE_KEYS, "DELETE": USE_KEYS}
    bodies = {"POST": ApiKeyWrite}

    def key(self, project_id: str, key_id: str) -> ApiKey:
        found = self.project(project_id)
        key = api_key_get(organization=self.ctx.organization, key_id=parse_id(key_id, "key_"))
        if key is None or key.project_id != found.pk:
            raise NotFound("No such API key.")
        return key

    def get(self, request: Request, project_id: str, key_id: str) -> Response:
        return Response(render.api_key(self.key(project_id, key_id)))

    def post(self, request: Request, project_id: str, key_id: str) -> Response:
        """Change name, expiry (``null``: never), per-key rate limits and monthly budget
        (``null``: none); fields left out keep their value."""
        key = self.key(project_id, key_id)
        body = ApiKeyWrite(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        limits = KeyLimits(
            requests_per_minute=data.get("requests_per_minute", key.requests_per_minute),
            tokens_per_minute=data.get("tokens_per_minute", key.tokens_per_minute),
            monthly_budget_nanos=data.get("monthly_budget_usd", key.monthly_budget_nanos),
        )
        try:
            updated = api_key_change(
                actor=_actor(self),
                api_key=key,
                name=data.get("name"),
                expires_at=_expiry(data, key.expires_at),
                limits=limits,
            )
        except NotAllowed as error:
            raise _refused(error) from None
        return Response(render.api_key(updated))

    def delete(self, request: Request, project_id: str, key_id: str) -> Response:
        """Revoke (the row stays for the audit trail); calls with it fail at once."""
        try:
            key = api_key_revoke_as(actor=_actor(self), api_key=self.key(project_id, key_id))
        except NotAllowed as error:
            raise _refused(error) from None
        return Response(
            {
                "object": "organization.project.api_key.deleted",
                "id": f"key_{key.pk}",
                "deleted": True,
            }
        )
