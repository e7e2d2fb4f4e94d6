"""Reads of tenant data. Every function takes the organization (or project) it is scoped to."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.models import ApiKey, Membership, Organization, Project, Role, User


def organizations_for_user(*, user: User) -> QuerySet[Organization]:
    """The organizations ``user`` is a member of."""
    return Organization.objects.filter(memberships__user=user).order_by("name")


def membership_get(*, user: User, organization: Organization) -> Membership | None:
    """``user``'s membership of ``organization`` or None."""
    return Membership.objects.filter(user=user, organization=organization).first()


def user_has_role(*, user: User, organization: Organization, roles: set[Role]) -> bool:
    """True when ``user`` holds one of ``roles`` in ``organization``."""
    return Membership.objects.filter(
        user=user, organization=organization, role__in=[r.value for r in roles]
    ).exists()


def projects_for_organization(
    *, organization: Organization, include_archived: bool = False
) -> QuerySet[Project]:
    """The organization's projects, newest first."""
    qs = Project.objects.filter(organization=organization)
    if not include_archived:
        qs = qs.filter(archived_at__isnull=True)
    return qs.order_by("name")


def project_get(*, organization: Organization, project_id: int) -> Project | None:
    """One project of ``organization`` (None for another tenant's id)."""
    return Project.objects.filter(organization=organization, pk=project_id).first()


def api_keys_for_organization(*, organization: Organization) -> QuerySet[ApiKey]:
    """The organization's keys, newest first."""
    return (
        ApiKey.objects.filter(organization=organization)
        .select_related("project")
        .order_by("-created_at")
    )


def api_key_get(*, organization: Organization, key_id: int) -> ApiKey | None:
    """One key of ``organization`` (None for another tenant's id)."""
    return ApiKey.objects.filter(organization=organization, pk=key_id).first()
