"""Login throttling: django-axes with a second, account-wide count.

axes counts wrong passwords per user name **and** address (``AXES_LOCKOUT_PARAMETERS``) and locks
that pair out at ``AXES_FAILURE_LIMIT``. Alone, that gives one account unlimited attempts from
unlimited addresses: an attacker with many addresses (or one who can make the address look new
on each try) starts every try with a fresh pair. :class:`LoginAttemptHandler` adds the
account's own count: once the wrong passwords for one user name, from every address together,
reach :data:`ACCOUNT_FAILURE_LIMIT` within ``AXES_COOLOFF_TIME``, that user name is
locked out (429) for every address until the window passes. Other accounts are not affected.

The address is ``REMOTE_ADDR`` (``AXES_IPWARE_META_PRECEDENCE_ORDER``), never a request header:
uvicorn sets it from ``X-Forwarded-For`` only when the connection comes from a trusted proxy
(``FORWARDED_ALLOW_IPS``), taking the rightmost address that is not a trusted proxy; our nginx
(``deploy/nginx/infrai.conf``) replaces the header with the peer it saw (``$remote_addr``), so
whatever a client sends in ``X-Forwarded-For`` never reaches the app.

A successful login resets the pair's count only (axes' ``AXES_RESET_ON_SUCCESS``), so the
account's owner logging in does not hand an attacker elsewhere a fresh allowance.
"""

from __future__ import annotations

from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest

#: Wrong passwords for one user name, from all addresses together, that lock it out (twice the
#: per-address ``AXES_FAILURE_LIMIT`` of 5: one mistyping user on one address never reaches it).
ACCOUNT_FAILURE_LIMIT = 10


def account_failures(request: HttpRequest, username: str) -> int:
    """Wrong passwords for ``username`` (case-insensitive), from every address, within the
    cool-off window."""
    attempts = AccessAttempt.objects.filter(username__iexact=username.strip())
    if settings.AXES_COOLOFF_TIME is not None:
        attempts = attempts.filter(attempt_time__gte=get_cool_off_threshold(request))
    total = attempts.aggregate(n=Sum("failures_since_start"))["n"]
    return int(total or 0)


class LoginAttemptHandler(AxesDatabaseHandler):
    """axes' database handler, also locking a user name out once its account-wide count of wrong
    passwords reaches :data:`ACCOUNT_FAILURE_LIMIT` (see the module docstring)."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """The count axes compares with ``AXES_FAILURE_LIMIT``: the pair's own count, or at least
        that limit once the account's count has reached its limit."""
        pair = super().get_failures(request, credentials)
        username = get_client_username(request, credentials)
        if not username:
            return pair
        if account_failures(request, username) >= ACCOUNT_FAILURE_LIMIT:
            return max(pair, get_failure_limit(request, credentials))
        return pair
