"""Writes the dashboard owns: sign-up, e-mail verification and invitation mail, playground keys.

Tenant data itself is written through ``accounts.services`` / ``billing.services``; this module
only composes them with what is dashboard-specific (mail, signed links, sessions).
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.sessions.backends.base import SessionBase
from django.core import signing
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey, Invitation, Organization, Project, Role, User
from accounts.policy import Actor
from accounts.services import api_key_create, api_key_roll, organization_create, user_create
from billing.services.starter import starter_credit_on_verified as _starter_on_verified

VERIFY_SALT = "dashboard.verify-email"
VERIFY_MAX_AGE_S = 3 * 24 * 3600
PLAYGROUND_KEY_TTL = timedelta(hours=8)
PLAYGROUND_KEY_MIN_LEFT = timedelta(minutes=10)  # a key closer to expiry gets a new secret
PLAYGROUND_SESSION_KEY = "playground_keys"


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


def _playground_key_name(user: User) -> str:
    return f"playground ({user.email})"


def playground_key(*, project: Project, user: User, session: SessionBase) -> tuple[ApiKey, str]:
    """The playground key of ``user`` in ``project`` and its full value, for this browser
    session: one key row per user and project, ever.

    The full key is kept in the user's server-side session (whoever holds that session may
    mint keys anyway), so reloads and later visits reuse it. Without it there (another
    browser, a new login) or once the key is revoked or about to expire, the same row gets a
    new secret valid for :data:`PLAYGROUND_KEY_TTL` (the old one stops working at once).
    """
    now = timezone.now()
    api_key = (
        ApiKey.objects.filter(project=project, created_by=user, name=_playground_key_name(user))
        .order_by("pk")
        .first()
    )
    held: dict[str, str] = session.get(PLAYGROUND_SESSION_KEY, {}).get(str(project.pk), {})
    usable = (
        api_key is not None
        and api_key.revoked_at is None
        and api_key.expires_at is not None
        and api_key.expires_at > now + PLAYGROUND_KEY_MIN_LEFT
        and held.get("id") == str(api_key.pk)
        and keys.hash_key(held.get("raw", "")) == api_key.key_hash
    )
    if usable:
        assert api_key is not None
        return api_key, held["raw"]
    if api_key is None:
        api_key, raw = api_key_create(
            project=project,
            name=_playground_key_name(user),
            expires_at=now + PLAYGROUND_KEY_TTL,
            created_by=user,
        )
    else:
        api_key, raw = api_key_roll(
            api_key=api_key,
            expires_at=now + PLAYGROUND_KEY_TTL,
            actor=Actor(user=user, role=Role.MEMBER),
        )
    session[PLAYGROUND_SESSION_KEY] = {
        **session.get(PLAYGROUND_SESSION_KEY, {}),
        str(project.pk): {"id": str(api_key.pk), "raw": raw},
    }
    return api_key, raw


def organization_create_for(*, user: User, name: str) -> Organization:
    """A new organization owned by ``user``."""
    return organization_create(name=name, owner=user)


def starter_credit_on_verified(*, user: User) -> int | None:
    """Grant the starter credit once ``user`` is verified; the amount granted (nano-USD)."""
    entry = _starter_on_verified(user=user)
    return entry.amount_nanos if entry is not None else None
