"""Who may set an API key's limits, and who may change someone else's credentials.

One rule for the dashboard and the management API: both go through the services of
:mod:`accounts.services` (``api_key_issue``, ``api_key_change``, ``api_key_revoke_as``) and
:mod:`management.services` (``admin_key_revoke``), which call the checks here.

**Limits are owned by owners and admins.** A key's ``requests_per_minute``,
``tokens_per_minute`` and ``monthly_budget_nanos`` (``None``: no budget of its own, i.e.
unbounded) are spending and load limits. Owners and admins set them to anything the fields
accept. Anyone else who may use keys (members) stays within a bound:

- creating a key: each limit at most :data:`MEMBER_KEY_CEILING` (the default rate limits and a
  monthly budget of USD 10); a limit left out *is* the ceiling, so a member's key always has a
  budget;
- changing a key: each limit at most the key's current value (a member may tighten a key's
  limits, never loosen them; removing a budget is loosening).

**An owner's credentials are an owner's to change.** A credential — an API key or an admin key —
belongs to its creator. Anyone may change or revoke their own. Only an owner may change or
revoke one whose creator is currently an owner of the organization; owners and admins may
change or revoke everyone else's; members only their own. (Memberships follow the same rule in
:func:`dashboard.permissions.may_edit_member`: admins never demote or remove owners.)

A refusal is :class:`NotAllowed` (a :class:`PermissionError`; 403 ``permission_denied`` over the
API, with ``param`` naming the field at fault when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from accounts.roles import Role
from money.usd import NANOS_PER_USD, nanos_to_usd_str

if TYPE_CHECKING:
    from accounts.models import User

OWNS_LIMITS = frozenset({Role.OWNER, Role.ADMIN})


class NotAllowed(PermissionError):
    """The actor's role does not allow this; ``param`` is the request field at fault, if one."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is acting: the person (for a management call, the admin key's creator) and the role
    they act with (for an admin key, its effective role, which may be below the person's);
    for the audit log (:mod:`accounts.audit`) also the way in (``via``: ``dashboard``, ``api``,
    ``admin``) and, over the API, the admin key's display form (``credential``; never its
    value)."""

    user: User | None
    role: Role
    via: str = "dashboard"
    credential: str = ""


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits. ``monthly_budget_nanos`` ``None`` is no budget of its own (unbounded)."""

    requests_per_minute: int
    tokens_per_minute: int
    monthly_budget_nanos: int | None


#: The most a member's new key may have (and what it gets for a limit left out). The rate limits
#: are the keys' defaults (``ApiKey`` fields); the budget is USD 10 a month.
MEMBER_KEY_CEILING = KeyLimits(
    requests_per_minute=600,
    tokens_per_minute=1_000_000,
    monthly_budget_nanos=10 * NANOS_PER_USD,
)

#: The bounds every key's limits stay within, whoever sets them (:func:`key_limits_validate`).
KEY_RPM_MAX = 1_000_000
KEY_TPM_MAX = 2_000_000_000
KEY_BUDGET_MAX_NANOS = 1_000_000 * NANOS_PER_USD


class InvalidKeyLimit(ValueError):
    """A limit outside what a key may have; ``param`` is the request/form field at fault."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def key_limits_validate(
    *,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    monthly_budget_nanos: int | None = None,
) -> None:
    """Raise :class:`InvalidKeyLimit` for the first limit out of bounds (``None``: not given,
    or no budget). The one check of a key's limits: the management API's ``ApiKeyWrite`` and
    the dashboard's key form both call it, so both refuse the same values with the same text;
    who may *raise* a limit is :func:`key_limits_check`."""
    if requests_per_minute is not None and not 1 <= requests_per_minute <= KEY_RPM_MAX:
        raise InvalidKeyLimit(
            f"Must be a whole number from 1 to {KEY_RPM_MAX} requests a minute.",
            param="requests_per_minute",
        )
    if tokens_per_minute is not None and not 1 <= tokens_per_minute <= KEY_TPM_MAX:
        raise InvalidKeyLimit(
            f"Must be a whole number from 1 to {KEY_TPM_MAX} tokens a minute.",
            param="tokens_per_minute",
        )
    if monthly_budget_nanos is not None and not 0 <= monthly_budget_nanos <= KEY_BUDGET_MAX_NANOS:
        raise InvalidKeyLimit(
            f"Must be from 0 to {nanos_to_usd_str(KEY_BUDGET_MAX_NANOS)} USD (empty: no budget).",
            param="monthly_budget_usd",
        )


#: The API field that carries each limit (``param`` of a refusal).
_PARAM = {
    "requests_per_minute": "requests_per_minute",
    "tokens_per_minute": "tokens_per_minute",
    "monthly_budget_nanos": "monthly_budget_usd",
}


def _exceeds(value: int | None, bound: int | None) -> bool:
    """``None`` is unbounded: it exceeds every bound but ``None``."""
    if bound is None:
        return False
    return value is None or value > bound


def key_limits_check(*, actor: Actor, requested: KeyLimits, bound: KeyLimits) -> None:
    """Raise :class:`NotAllowed` when ``actor`` may not give a key ``requested``: owners and
    admins may give anything; others nothing above ``bound`` (:data:`MEMBER_KEY_CEILING` for a
    new key, the key's current limits for a change), field by field."""
    if actor.role in OWNS_LIMITS:
        return
    for field in fields(KeyLimits):
        value, limit = getattr(requested, field.name), getattr(bound, field.name)
        if _exceeds(value, limit):
            param = _PARAM[field.name]
            what = "no budget" if value is None else f"'{param}' above {_shown(field.name, limit)}"
            raise NotAllowed(
                f"Your role ('{actor.role.value}') may not give a key {what}: only an owner or "
                "admin raises or removes a key's limits.",
                param=param,
            )


def _shown(name: str, value: int | None) -> str:
    if name == "monthly_budget_nanos" and value is not None:
        return f"{nanos_to_usd_str(value)} USD"
    return str(value)


def credential_change_check(
    *, actor: Actor, creator_id: int | None, creator_role: Role | str | None, what: str
) -> None:
    """Raise :class:`NotAllowed` unless ``actor`` may change or revoke a credential (``what``:
    "API key", "admin key") created by the user ``creator_id``, whose current role in the
    organization is ``creator_role`` (``None``: no longer a member)."""
    if actor.user is not None and creator_id is not None and actor.user.pk == creator_id:
        return
    if creator_role == Role.OWNER:
        if actor.role != Role.OWNER:
            raise NotAllowed(f"Only an owner can change or revoke an owner's {what}.")
        return
    if actor.role not in OWNS_LIMITS:
        raise NotAllowed(
            f"Only an owner or admin can change or revoke an {what} someone else created."
        )
