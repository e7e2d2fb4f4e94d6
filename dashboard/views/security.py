"""Account security: two-factor authentication (TOTP) and the two-step login.

The password step is Django's ``LoginView`` (:class:`TwoStepLoginView`): for a user with an
authenticator it does **not** log the session in, it remembers who passed the password (user
id, backend, where to go next, when) in the still-anonymous session and sends them to
:func:`login_code`. Only a correct code there logs the session in (``auth.login``, which also
rotates the session key, then ``django_otp.login``), so no page, websocket or admin view ever
sees a half-logged-in user. The step expires after :data:`PENDING_TTL_S`.

Wrong codes count as failed logins (``user_login_failed``, the signal axes counts wrong passwords
from): the lockout of :mod:`accounts.throttle` — 5 per user name and address, 10 per user name —
bounds code guesses too, and a locked-out pair is refused the code step (429) as it is the
password step. ``/admin/login/`` is the same two-step login with the admin's form and template.
"""

from __future__ import annotations

import time
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_lockout_response
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME, login, user_login_failed
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_otp import login as otp_login

from accounts import twofactor
from accounts.models import User
from accounts.selectors import user_get
from dashboard.views.common import no_store

PENDING = "2fa.pending"
RECOVERY_SHOW = "2fa.recovery-codes"
PENDING_TTL_S = 300


class CodeForm(forms.Form):
    code = forms.CharField(
        label="Authentication code",
        max_length=32,
        strip=True,
        help_text="The 6-digit code your authenticator app shows now, or a recovery code.",
        widget=forms.TextInput(
            attrs={"autocomplete": "one-time-code", "autocapitalize": "off", "spellcheck": "false"}
        ),
    )


class ConfirmForm(CodeForm):
    """Enrollment: only the authenticator's code (recovery codes do not exist yet)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["code"].help_text = "The 6-digit code your authenticator app shows now."
        self.fields["code"].widget.attrs["inputmode"] = "numeric"


# --- login -------------------------------------------------------------------------------------


class TwoStepLoginView(LoginView):
    """Django's login; a user with an authenticator continues to :func:`login_code`."""

    redirect_authenticated_user = True

    def form_valid(self, form: Any) -> HttpResponse:
        user = form.get_user()
        if not twofactor.enabled(user=user):
            return super().form_valid(form)
        self.request.session[PENDING] = {
            "user_id": user.pk,
            "backend": user.backend,
            "next": self.get_success_url(),
            "at": time.time(),
        }
        return redirect("dashboard:login_code")


def _pending(request: HttpRequest) -> tuple[User, dict[str, Any]] | None:
    pending = request.session.get(PENDING)
    if not isinstance(pending, dict) or time.time() - pending.get("at", 0) > PENDING_TTL_S:
        request.session.pop(PENDING, None)
        return None
    user = user_get(user_id=pending["user_id"])
    if user is None or not user.is_active:
        return None
    return user, pending


@never_cache
def login_code(request: HttpRequest) -> HttpResponseBase:
    """The second login step: a code from the authenticator or a recovery code.

    Without a password step in the last :data:`PENDING_TTL_S` seconds: back to the login page.
    """
    found = _pending(request)
    if found is None:
        messages.info(request, "Log in again: the code step was not started or has expired.")
        return redirect("dashboard:login")
    user, pending = found
    credentials = {"username": user.email}
    if not AxesProxyHandler.is_allowed(request, credentials):
        return get_lockout_response(request, None, credentials)
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        device = twofactor.verify(user=user, code=form.cleaned_data["code"])
        if device is not None:
            del request.session[PENDING]
            login(request, user, backend=pending["backend"])
            otp_login(request, device)
            if device.name == twofactor.RECOVERY:
                left = twofactor.recovery_codes_left(user=user)
                messages.warning(
                    request,
                    f"You used a recovery code; {left} left. Make new ones on the account "
                    "security page if you are running out.",
                )
            return redirect(pending["next"])
        # Counted by axes like a wrong password; at the limit it marks the request locked out
        # and its middleware answers 429 instead of this page.
        user_login_failed.send(sender=__name__, credentials=credentials, request=request)
        form.add_error("code", "That code is not right (or was already used). Try again.")
    return render(request, "registration/login_code.html", {"form": form, "email": user.email})


@never_cache
def admin_login(request: HttpRequest) -> HttpResponseBase:
    """``/admin/login/``: :class:`TwoStepLoginView` with the admin's form (staff only) and
    template, as ``AdminSite.login`` sets them up."""
    site = admin.site
    if request.method == "GET" and site.has_permission(request):
        return redirect(reverse("admin:index", current_app=site.name))
    context = {
        **site.each_context(request),
        "title": "Log in",
        "subtitle": None,
        "app_path": request.get_full_path(),
        "username": request.user.get_username(),
    }
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=site.name)
    view = TwoStepLoginView.as_view(
        extra_context=context,
        authentication_form=AdminAuthenticationForm,
        template_name="admin/login.html",
        redirect_authenticated_user=False,
    )
    response: HttpResponseBase = view(request)
    return response


# --- account security page ----------------------------------------------------------------------


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)
    return request.user


@login_required
def security(request: HttpRequest) -> HttpResponse:
    """Two-factor status: turn it on (to :func:`setup`), new recovery codes, turn it off."""
    user = _user(request)
    on = twofactor.enabled(user=user)
    return render(
        request,
        "dashboard/security.html",
        {
            "enabled": on,
            "codes_left": twofactor.recovery_codes_left(user=user) if on else 0,
            "form": CodeForm(),
        },
    )


@login_required
@require_POST
def setup_start(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    if twofactor.enabled(user=user):
        return redirect("dashboard:security")
    twofactor.enrollment_start(user=user)
    return redirect("dashboard:security_setup")


@login_required
def setup(request: HttpRequest) -> HttpResponse:
    """Scan the QR code (or type the secret), then confirm with a code; the recovery codes are
    then shown once on :func:`recovery_codes`."""
    user = _user(request)
    device = twofactor.pending_enrollment(user=user)
    if device is None:
        return redirect("dashboard:security")
    form = ConfirmForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        codes = twofactor.enrollment_confirm(user=user, code=form.cleaned_data["code"])
        if codes is not None:
            device.confirmed = True
            otp_login(request, device)  # this session gave the code: it is verified
            request.session[RECOVERY_SHOW] = codes
            messages.success(request, "Two-factor authentication is on.")
            return redirect("dashboard:security_recovery")
        form.add_error("code", "That code is not right. Check the clock of your phone and retry.")
    return no_store(
        render(
            request,
            "dashboard/security_setup.html",
            {
                "form": form,
                "qr_svg": twofactor.qr_svg(device),
                "secret": twofactor.secret_base32(device),
            },
        )
    )


@login_required
def recovery_codes(request: HttpRequest) -> HttpResponse:
    """The recovery codes just made, shown once: the session forgets them as they are shown."""
    codes = request.session.pop(RECOVERY_SHOW, None)
    if not codes:
        return redirect("dashboard:security")
    return no_store(render(request, "dashboard/security_recovery.html", {"codes": codes}))


def _code_checked(request: HttpRequest, user: User) -> bool:
    form = CodeForm(request.POST)
    if form.is_valid() and twofactor.verify(user=user, code=form.cleaned_data["code"]):
        return True
    messages.error(request, "That code is not right; nothing was changed.")
    return False


@login_required
@require_POST
def recovery_regenerate(request: HttpRequest) -> HttpResponse:
    """New recovery codes (the old ones stop working); needs a current code."""
    user = _user(request)
    if not twofactor.enabled(user=user) or not _code_checked(request, user):
        return redirect("dashboard:security")
    request.session[RECOVERY_SHOW] = twofactor.recovery_codes_regenerate(user=user)
    return redirect("dashboard:security_recovery")


@login_required
@require_POST
def disable(request: HttpRequest) -> HttpResponse:
    """Turn two-factor off; needs a current code (authenticator or recovery)."""
    user = _user(request)
    if twofactor.enabled(user=user) and _code_checked(request, user):
        twofactor.disable(user=user)
        messages.success(request, "Two-factor authentication is off.")
    return redirect("dashboard:security")
