"""Users, organizations (the tenants), memberships, projects and API keys."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.utils import timezone

from accounts.roles import Role

__all__ = [
    "ApiKey",
    "AuditEvent",
    "Invitation",
    "Membership",
    "Organization",
    "Project",
    "Role",
    "User",
]


class UserManager(BaseUserManager["User"]):
    """Users log in with their e-mail address."""

    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra: Any) -> User:
        if not email:
            raise ValueError("An e-mail address is required.")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> User:
        extra.update(is_staff=True, is_superuser=True, email_verified=True)
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person: a customer in the dashboard or a staff member in the admin."""

    email = models.EmailField(unique=True)
    name = models.CharField(max_length=150, blank=True)
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)  # type: ignore[misc]
    email_verified = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []  # type: ignore[misc]

    def __str__(self) -> str:
        return self.email


class Organization(models.Model):
    """The tenant. It owns the wallet (billing), its projects and their keys."""

    name = models.CharField(max_length=150)
    slug = models.SlugField(max_length=64, unique=True)
    log_prompts = models.BooleanField(
        default=False, help_text="Store prompt text in the request log (off unless opted in)."
    )
    response_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "Days stored Responses (/v1/responses with store) are kept; empty: the platform's "
            "default (INFRAI_RESPONSES_RETENTION_DAYS); 0: zero retention — nothing is stored "
            "and previous_response_id is refused."
        ),
    )
    request_log_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "Days the request log keeps this organization's calls (their metadata); empty: the "
            "platform's default (INFRAI_REQUEST_LOG_RETENTION_DAYS). Daily usage sums are kept "
            "regardless."
        ),
    )
    prompt_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=(
            "Days a logged prompt (log_prompts) is kept before it is cleared from its call's row; "
            "empty: the platform's default (INFRAI_PROMPT_RETENTION_DAYS)."
        ),
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in one organization."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="uniq_membership")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.organization} ({self.role})"


class Project(models.Model):
    """A unit of work inside an organization; keys belong to a project."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="projects"
    )
    name = models.CharField(max_length=100)
    monthly_budget_nanos = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Spending cap per calendar month in nano-USD; empty = none.",
    )
    archived_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="uniq_project_name")
        ]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.name}"


class ApiKey(models.Model):
    """A project key. Only a keyed hash and the last four characters are stored."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, help_text="The first characters, for display.")
    last_four = models.CharField(max_length=4)
    key_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    requests_per_minute = models.PositiveIntegerField(default=600)
    tokens_per_minute = models.PositiveIntegerField(default=1_000_000)
    monthly_budget_nanos = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Spending cap of this key per UTC calendar month in nano-USD; empty = none.",
    )

    class Meta:
        indexes = [models.Index(fields=["organization", "created_at"])]

    def __str__(self) -> str:
        return self.display

    @property
    def display(self) -> str:
        """What the UI and admin show of a key: ``ifr_abcd…wxyz``."""
        return f"{self.prefix}…{self.last_four}"


class Invitation(models.Model):
    """An invitation by e-mail to join an organization with a role.

    Only a hash of the token is stored (the link in the e-mail carries the token). It is
    accepted once, by a user whose verified e-mail address equals ``email``.
    """

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="invitations"
    )
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["organization", "created_at"])]

    def __str__(self) -> str:
        return f"{self.email} → {self.organization} ({self.role})"

    @property
    def is_pending(self) -> bool:
        """Neither accepted, revoked nor expired."""
        return (
            self.accepted_at is None
            and self.revoked_at is None
            and self.expires_at > timezone.now()
        )


# --- the audit log (written by accounts.audit) ---------------------------------------------


class AppendOnly(RuntimeError):
    """An audit event was about to be changed or deleted."""


class AuditAction(models.TextChoices):
    KEY_CREATE = "key.create", "API key created"
    KEY_UPDATE = "key.update", "API key changed"
    KEY_REVOKE = "key.revoke", "API key revoked"
    KEY_ROLL = "key.roll", "API key given a new secret"
    ADMIN_KEY_CREATE = "admin_key.create", "Admin key created"
    ADMIN_KEY_REVOKE = "admin_key.revoke", "Admin key revoked"
    MEMBER_INVITE = "member.invite", "Member invited"
    MEMBER_INVITE_REVOKE = "member.invite_revoke", "Invitation revoked"
    MEMBER_JOIN = "member.join", "Invitation accepted"
    MEMBER_ADD = "member.add", "Member added"
    MEMBER_ROLE = "member.role", "Role changed"
    MEMBER_REMOVE = "member.remove", "Member removed"
    PROJECT_CREATE = "project.create", "Project created"
    PROJECT_UPDATE = "project.update", "Project changed"
    PROJECT_ARCHIVE = "project.archive", "Project archived"
    PROJECT_RESTORE = "project.restore", "Project restored"
    AUTO_RECHARGE = "wallet.auto_recharge", "Auto-recharge settings changed"
    CARD_REMOVE = "wallet.card_remove", "Saved card removed"
    LOW_BALANCE = "wallet.low_balance", "Low-balance alert changed"


class Via(models.TextChoices):
    DASHBOARD = "dashboard", "Dashboard"
    API = "api", "Management API"
    ADMIN = "admin", "Staff admin"
    SYSTEM = "system", "System"


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnly("audit events are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are never deleted")


class AuditEvent(models.Model):
    """One change, by whom (``actor``, ``via``, ``credential``), to what (``target``)."""

    organization = models.ForeignKey(
        "accounts.Organization", on_delete=models.PROTECT, related_name="+"
    )
    actor = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_email = models.CharField(max_length=254, blank=True)
    via = models.CharField(max_length=16, choices=Via.choices)
    credential = models.CharField(
        max_length=40, blank=True, help_text="The admin key a management call was made with."
    )
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    target = models.CharField(max_length=200)
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["organization", "-id"], name="audit_org_id_idx")]

    def __str__(self) -> str:
        return f"{self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("audit events are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are never deleted")

    @property
    def who(self) -> str:
        """The actor as a page shows it."""
        return self.actor_email or Via(self.via).label
