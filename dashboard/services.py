"""Writes the dashboard owns: sign-up, e-mail verification and invitation mail, playground keys.

Tenant data itself is written through ``accounts.services`` / ``billing.services``; this module
only composes them with what is dashboard-specific (mail, signed links, sessions).
"""

from __future__ import annotations

from datetime import timedelta

from django.core import signing
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.models import ApiKey, Invitation, Organization, Project, User
from accounts.services import api_key_create, organization_create, user_create
from billing.services.starter import starter_credit_on_verified as _starter_on_verified

VERIFY_SALT = "dashboard.verify-email"
VERIFY_MAX_AGE_S = 3 * 24 * 3600
PLAYGROUND_KEY_TTL = timedelta(hours=1)


def signup(*, email: str, password: str, organization_name: str) -> User:
    """Create an unverified user who owns a new organization (one transaction); with an empty
    ``organization_name`` (sign-up from an invitation) the user owns none."""
    with transaction.atomic():
        user = user_create(email=email, password=password)
        if organization_name:
            organization_create(name=organization_name, owner=user)
    return user


def verification_token_make(*, user: User) -> str:
    """A signed, timestamped token naming the user and the address being verified."""
    return signing.dumps({"u": user.pk, "e": user.email}, salt=VERIFY_SALT)


def verification_token_read(*, token: str) -> tuple[int, str] | None:
    """``(user_id, email)`` of a valid token younger than three days, else None."""
    try:
        data = signing.loads(token, salt=VERIFY_SALT, max_age=VERIFY_MAX_AGE_S)
    except signing.BadSignature:
        return None
    return int(data["u"]), str(data["e"])


def verification_email_send(*, user: User, verify_url: str) -> None:
    """Mail the verification link (``verify_url`` is absolute and contains the token)."""
    body = render_to_string("registration/verify_email.txt", {"user": user, "url": verify_url})
    send_mail("Verify your e-mail address for infrai", body, None, [user.email])


def invitation_email_send(*, invitation: Invitation, accept_url: str) -> None:
    """Mail an invitation link; the caller runs this after the invitation is committed."""
    body = render_to_string(
        "registration/invitation_email.txt",
        {"invitation": invitation, "url": accept_url},
    )
    name = " ".join(invitation.organization.name.split())  # a header is one line
    send_mail(
        f"You are invited to {name} on infrai",
        body,
        None,
        [invitation.email],
    )


def playground_key_create(*, project: Project, user: User) -> tuple[ApiKey, str]:
    """A key for the playground that expires in an hour; returns the row and the full key."""
    return api_key_create(
        project=project,
        name=f"playground ({user.email})",
        expires_at=timezone.now() + PLAYGROUND_KEY_TTL,
        created_by=user,
    )


def organization_create_for(*, user: User, name: str) -> Organization:
    """A new organization owned by ``user``."""
    return organization_create(name=name, owner=user)


def starter_credit_on_verified(*, user: User) -> int | None:
    """Grant the starter credit once ``user`` is verified; the amount granted (nano-USD)."""
    entry = _starter_on_verified(user=user)
    return entry.amount_nanos if entry is not None else None
