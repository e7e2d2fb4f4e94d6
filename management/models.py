"""Admin keys: the credentials of the management API (``/v1/organization/…``).

An admin key belongs to one organization and acts with the role its creator had when creating
it, re-checked on every call against the creator's current membership (see
:func:`management.auth.effective_role`). Only a keyed hash and the last four characters are
stored. The audit trail is on the row: who created it and when, who revoked it and when, when
it was last used.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import Organization, Role, User


class AdminKey(models.Model):
    """A management API key (``ifr_admin_…``). Never calls ``/v1`` inference."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="admin_keys"
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="The first characters, for display.")
    last_four = models.CharField(max_length=4)
    key_hash = models.CharField(max_length=64, unique=True)
    role = models.CharField(
        max_length=16, choices=Role.choices, help_text="The creator's role at creation."
    )
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    requests_per_minute = models.PositiveIntegerField(default=300)

    class Meta:
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return self.display

    @property
    def display(self) -> str:
        """What the dashboard shows of a key: ``ifr_admin_ab…wxyz``."""
        return f"{self.prefix}…{self.last_four}"
