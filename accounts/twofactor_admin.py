"""The admin's half of two-factor authentication (django-otp's ``OTPAdminSite``, for staff with
an authenticator only).

Every login — the dashboard's and the admin's (``/admin/login/`` is the dashboard's two-step
login with the admin's form and template, :func:`dashboard.views.security.admin_login`) — asks
a user with an authenticator for a code before the session is logged in, so such a session is
*verified* (django-otp's ``user.is_verified()``). This middleware covers what the login cannot:
a staff session that logged in **before** its user turned two-factor on. On an admin page it is
logged out and sent to the admin login, which then asks for the code. Staff without an
authenticator are not affected (one indexed query per admin page for an unverified session).
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import REDIRECT_FIELD_NAME, logout
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode

from accounts import twofactor
from accounts.models import User


class AdminSecondFactorMiddleware:
    """Log out an unverified admin session of a staff user with an authenticator."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self._refused(request):
            logout(request)
            login = reverse("admin:login")
            return HttpResponseRedirect(
                f"{login}?{urlencode({REDIRECT_FIELD_NAME: request.get_full_path()})}"
            )
        return self.get_response(request)

    @staticmethod
    def _refused(request: HttpRequest) -> bool:
        admin_root = reverse("admin:index")
        if not request.path.startswith(admin_root) or request.path in (
            reverse("admin:login"),
            reverse("admin:logout"),
        ):
            return False
        user = request.user
        if not user.is_authenticated or not user.is_staff or not isinstance(user, User):
            return False
        if getattr(user, "is_verified", lambda: False)():
            return False
        return twofactor.enabled(user=user)
