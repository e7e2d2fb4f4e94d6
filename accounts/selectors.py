"""Reads of tenant data. Every function takes the organization (or project) it is scoped to."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import ApiKey, Invitation, Membership, Organization, Project, User
from accounts.roles import Role


def organizations_for_user(*, user: User) -> QuerySet[Organization]:
    """The organizations ``user`` is a member of."""
    return Organization.objects.filter(memberships__user=user).order_by("name")


def organization_get_by_slug(*, slug: str) -> Organization | None:
    """The organization with ``slug`` or None (no tenancy check: pair it with a role check)."""
    return Organization.objects.filter(slug=slug).first()


def organizations_owned_by(*, user: User) -> QuerySet[Organization]:
    """The organizations ``user`` owns, oldest first."""
    return Organization.objects.filter(
        memberships__user=user, memberships__role=Role.OWNER
    ).order_by("pk")


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
    """The organization's projects by name (the order of the dashboard's lists and pickers)."""
    qs = Project.objects.filter(organization=organization)
    if not include_archived:
        qs = qs.filter(archived_at__isnull=True)
    return qs.order_by("name")


def project_get(*, organization: Organization, project_id: int) -> Project | None:
    """One project of ``organization`` (None for another tenant's id)."""
    return Project.objects.filter(organization=organization, pk=project_id).first()


def project_get_by_name(*, organization: Organization, name: str) -> Project | None:
    """The project of ``organization`` named ``name`` (names are unique per organization)."""
    return Project.objects.filter(organization=organization, name=name).first()


def api_keys_for_project(*, organization: Organization, project: Project) -> QuerySet[ApiKey]:
    """The keys of one project of ``organization`` (revoked ones included), oldest first."""
    return ApiKey.objects.filter(organization=organization, project=project).order_by("pk")


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


def organization_for_member(*, user: User, slug: str) -> tuple[Organization, Membership] | None:
    """The organization ``slug`` and ``user``'s membership of it, or None when not a member."""
    membership = (
        Membership.objects.select_related("organization")
        .filter(user=user, organization__slug=slug)
        .first()
    )
    return None if membership is None else (membership.organization, membership)


def memberships_for_organization(*, organization: Organization) -> QuerySet[Membership]:
    """The organization's members with their users, by e-mail."""
    return (
        Membership.objects.filter(organization=organization)
        .select_related("user")
        .order_by("user__email")
    )


def membership_get_by_user_id(*, organization: Organization, user_id: int) -> Membership | None:
    """The membership of user ``user_id`` in ``organization`` with its user (None when the
    user is not a member)."""
    return (
        Membership.objects.filter(organization=organization, user_id=user_id)
        .select_related("user")
        .first()
    )


def membership_get_by_id(*, organization: Organization, membership_id: int) -> Membership | None:
    """One membership of ``organization`` (None for another tenant's id)."""
    return (
        Membership.objects.filter(organization=organization, pk=membership_id)
        .select_related("user")
        .first()
    )


def invitations_pending_for_organization(*, organization: Organization) -> QuerySet[Invitation]:
    """Invitations not yet accepted, revoked or expired, newest first."""
    return Invitation.objects.filter(
        organization=organization,
        accepted_at=None,
        revoked_at=None,
        expires_at__gt=timezone.now(),
    ).order_by("-created_at")


def invitations_for_organization(*, organization: Organization) -> QuerySet[Invitation]:
    """Every invitation of ``organization`` (accepted, revoked and expired ones included),
    oldest first."""
    return Invitation.objects.filter(organization=organization).order_by("pk")


def invitation_get(*, organization: Organization, invitation_id: int) -> Invitation | None:
    """One invitation of ``organization`` (None for another tenant's id)."""
    return Invitation.objects.filter(organization=organization, pk=invitation_id).first()


def invitation_get_by_token_hash(*, token_hash: str) -> Invitation | None:
    """The invitation a link's token belongs to (hash it with ``invitation_token_hash``)."""
    return Invitation.objects.select_related("organization").filter(token_hash=token_hash).first()


def user_get(*, user_id: int) -> User | None:
    """The user with ``user_id`` or None."""
    return User.objects.filter(pk=user_id).first()


def member_emails(*, organization_id: int, roles: frozenset[Role]) -> list[str]:
    """The addresses to notify in an organization: active members with a verified address
    holding one of ``roles``, sorted (what billing's e-mails go to)."""
    return sorted(
        Membership.objects.filter(
            organization_id=organization_id,
            role__in=[r.value for r in roles],
            user__is_active=True,
            user__email_verified=True,
        ).values_list("user__email", flat=True)
    )
