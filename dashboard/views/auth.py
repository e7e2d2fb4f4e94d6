"""Sign-up, e-mail verification and the landing redirect (log in/out and password reset are
Django's own views with our templates under ``templates/registration/``)."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.models import Invitation, User
from accounts.selectors import invitation_get_by_token_hash, organizations_for_user, user_get
from accounts.services import invitation_token_hash, user_mark_email_verified
from dashboard import services
from dashboard.forms import SignupForm
from dashboard.templatetags.dashboard import usd
from infra.db_router import primary_reads


def _send_verification(request: HttpRequest, user: User) -> None:
    token = services.verification_token_make(user=user)
    url = request.build_absolute_uri(reverse("dashboard:verify_email", args=[token]))
    services.verification_email_send(user=user, verify_url=url)


def home(request: HttpRequest) -> HttpResponse:
    """Signed out: the landing page. Signed in: the last organization used (or the first)."""
    if not request.user.is_authenticated:
        return render(request, "dashboard/landing.html")
    assert isinstance(request.user, User)
    if not request.user.email_verified:
        return redirect("dashboard:verify_pending")
    after_verify = request.session.pop(AFTER_VERIFY, "")
    if after_verify and _INVITE_PATH.match(after_verify):
        return redirect(after_verify)
    orgs = organizations_for_user(user=request.user)
    slug = request.session.get("org_slug")
    org = orgs.filter(slug=slug).first() if slug else None
    org = org or orgs.first()
    if org is None:
        return redirect("dashboard:org_create")
    return redirect("dashboard:overview", slug=org.slug)


AFTER_VERIFY = "dashboard.after-verify"
_INVITE_PATH = re.compile(r"^/invite/[A-Za-z0-9_\-]+/$")


def _invitation_of(next_url: str) -> Invitation | None:
    """The pending invitation a sign-up's ``next`` points at (only ``/invite/<token>/``)."""
    if not _INVITE_PATH.match(next_url):
        return None
    token = next_url.rstrip("/").rsplit("/", 1)[1]
    invitation = invitation_get_by_token_hash(token_hash=invitation_token_hash(token))
    return invitation if invitation is not None and invitation.is_pending else None


def signup(request: HttpRequest) -> HttpResponse:
    """Sign up. From an invitation (``?next=/invite/<token>/``) no organization is created and,
    once the address is verified, the user lands on the invitation to accept it."""
    if request.user.is_authenticated:
        return redirect("dashboard:home")
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    invitation = _invitation_of(next_url)
    if invitation is None:
        next_url = ""
    form = SignupForm(request.POST or None, invited_email=invitation.email if invitation else "")
    if request.method == "POST" and form.is_valid():
        user = services.signup(
            email=form.cleaned_data["email"],
            password=form.cleaned_data["password"],
            organization_name=form.cleaned_data.get("organization_name", ""),
        )
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        if next_url:
            request.session[AFTER_VERIFY] = next_url
        _send_verification(request, user)
        return redirect("dashboard:verify_pending")
    return render(
        request,
        "registration/signup.html",
        {"form": form, "next": next_url, "invitation": invitation},
    )


@login_required
def verify_pending(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    if request.user.email_verified:
        return redirect("dashboard:home")
    return render(request, "registration/verify_pending.html")


@login_required
@require_POST
def verify_resend(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    if not request.user.email_verified:
        _send_verification(request, request.user)
        messages.success(request, f"We sent a new link to {request.user.email}.")
    return redirect("dashboard:verify_pending")


@primary_reads  # it grants starter credit from what it reads
def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    """Open the link from the e-mail: mark the address verified if the token still matches."""
    found = services.verification_token_read(token=token)
    user = user_get(user_id=found[0]) if found else None
    if found is None or user is None or user.email != found[1]:
        return render(request, "registration/verify_invalid.html", status=400)
    user_mark_email_verified(user=user)
    user.email_verified = True
    credit = services.starter_credit_on_verified(user=user)
    messages.success(request, "Your e-mail address is verified.")
    if credit is not None:
        messages.success(request, f"Your organization got {usd(credit)} of starter credit.")
    if request.user.is_authenticated and request.user.pk == user.pk:
        return redirect("dashboard:home")
    return redirect("dashboard:login")
