"""Two-factor authentication (TOTP) for dashboard and admin users, on django-otp.

A user has two-factor on when they own a *confirmed* :class:`TOTPDevice` (an authenticator app:
RFC 6238, SHA-1, 6 digits, 30 s steps, one step of tolerance either side). Enrolling creates an
unconfirmed device holding the new secret; the user scans it (``otpauth://`` URI as a QR code)
and confirms with a code, which confirms the device and issues :data:`RECOVERY_CODE_COUNT`
one-time recovery codes (a :class:`StaticDevice` named ``recovery``). Disabling deletes both.

A code is checked by shape: six digits against the authenticator, anything else against the
recovery codes (so a mistyped TOTP code never uses up a recovery code, and each device keeps
its own django-otp throttle). Verification goes through :func:`django_otp.verify_token`, which
locks the device row (``SELECT … FOR UPDATE``): a recovery code is consumed exactly once even by
two concurrent submissions, and a TOTP step is accepted once (``last_t``: a code already used
is refused until the next step).

Guess bounds: django-otp's throttle (each failure doubles a per-device wait) and the login
throttle of :mod:`accounts.throttle` — the login's code step reports a wrong code as a failed
login, so wrong codes count with wrong passwords towards the same axes lockout.
"""

from __future__ import annotations

import io
import re

import qrcode
import qrcode.image.svg
from django.db import transaction
from django_otp import verify_token
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from accounts.models import User

RECOVERY_CODE_COUNT = 10
AUTHENTICATOR = "authenticator"
RECOVERY = "recovery"
_TOTP_SHAPE = re.compile(r"^\d{6}$")


def enabled(*, user: User) -> bool:
    """Whether ``user`` must give a second factor when logging in (one query)."""
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def enrollment_start(*, user: User) -> TOTPDevice:
    """A fresh unconfirmed authenticator for ``user`` (an earlier unconfirmed one is dropped).

    Raises ``ValueError`` when two-factor is already on (disable it first)."""
    with transaction.atomic():
        if enabled(user=user):
            raise ValueError("two-factor authentication is already on")
        TOTPDevice.objects.filter(user=user, confirmed=False).delete()
        return TOTPDevice.objects.create(user=user, name=AUTHENTICATOR, confirmed=False)


def pending_enrollment(*, user: User) -> TOTPDevice | None:
    """The unconfirmed authenticator :func:`enrollment_start` made, if any."""
    return TOTPDevice.objects.filter(user=user, confirmed=False).first()


def secret_base32(device: TOTPDevice) -> str:
    """The secret as the base32 text authenticator apps accept when typed, in groups of four."""
    from base64 import b32encode

    text = b32encode(device.bin_key).decode("ascii").rstrip("=")
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def qr_svg(device: TOTPDevice) -> str:
    """The device's ``otpauth://`` URI as an inline SVG QR code (drawn here: no service sees
    the secret). The markup is produced by the ``qrcode`` package, without an XML prolog."""
    image = qrcode.make(device.config_url, image_factory=qrcode.image.svg.SvgPathImage)
    out = io.BytesIO()
    image.save(out)
    svg = out.getvalue().decode("utf-8")
    svg = svg[svg.index("<svg") :]
    # Millimetres → CSS pixels, drawn at 200 px (scanned easily from a laptop screen).
    return re.sub(r'^<svg width="[^"]*" height="[^"]*"', '<svg width="200" height="200"', svg)


def enrollment_confirm(*, user: User, code: str) -> list[str] | None:
    """Confirm the pending authenticator with a code it shows now.

    Returns the new recovery codes (shown to the user once, never again) when the code
    matches, ``None`` when it does not or nothing is pending. Atomic: the device is confirmed
    and the recovery codes replaced together."""
    device = pending_enrollment(user=user)
    if device is None or not _TOTP_SHAPE.match(_normalise(code)):
        return None
    with transaction.atomic():
        accepted = verify_token(user, device.persistent_id, _normalise(code))
        if accepted is None:
            return None
        TOTPDevice.objects.filter(pk=device.pk).update(confirmed=True)
        return _recovery_codes_replace(user=user)


def recovery_codes_regenerate(*, user: User) -> list[str]:
    """Replace ``user``'s recovery codes with :data:`RECOVERY_CODE_COUNT` new ones (the old
    ones stop working). The caller shows the returned codes once."""
    with transaction.atomic():
        return _recovery_codes_replace(user=user)


def recovery_codes_left(*, user: User) -> int:
    """How many unused recovery codes ``user`` has."""
    return StaticToken.objects.filter(device__user=user, device__name=RECOVERY).count()


def _recovery_codes_replace(*, user: User) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=RECOVERY, confirmed=True)
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODE_COUNT)]
    StaticToken.objects.bulk_create([StaticToken(device=device, token=c) for c in codes])
    return codes


def verify(*, user: User, code: str) -> Device | None:
    """The device that accepts ``code`` for ``user`` (a recovery code is used up), or ``None``.

    Six digits are checked against the confirmed authenticator only; other text against the
    recovery codes only (spaces, dashes and case ignored). Each failure counts in that device's
    django-otp throttle; the caller must also count it as a failed login (see the module
    docstring)."""
    token = _normalise(code)
    if not token:
        return None
    if _TOTP_SHAPE.match(token):
        device: Device | None = TOTPDevice.objects.filter(user=user, confirmed=True).first()
    else:
        device = StaticDevice.objects.filter(user=user, confirmed=True).first()
    if device is None:
        return None
    accepted: Device | None = verify_token(user, device.persistent_id, token)
    return accepted


def disable(*, user: User) -> None:
    """Turn two-factor off for ``user``: the authenticator and the recovery codes are deleted.
    The caller must have checked a current code (:func:`verify`) first."""
    with transaction.atomic():
        TOTPDevice.objects.filter(user=user).delete()
        StaticDevice.objects.filter(user=user).delete()


def _normalise(code: str) -> str:
    return re.sub(r"[\s-]", "", code or "").lower()
