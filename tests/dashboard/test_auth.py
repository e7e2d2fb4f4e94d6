"""Sign-up, e-mail verification, log in/out, password reset."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from accounts.models import Membership, Role, User

pytestmark = pytest.mark.django_db


def _link(body: str) -> str:
    match = re.search(r"https?://\S+", body)
    assert match, body
    return match.group(0).split("testserver", 1)[1]


def test_signup_creates_an_unverified_owner_and_mails_a_link_that_verifies(client):
    response = client.post(
        "/signup/",
        {"email": "Ada@Example.com", "password": "a long passphrase", "organization_name": "Acme"},
    )
    assert response.status_code == 302 and response["Location"] == "/verify/"
    user = User.objects.get(email="ada@example.com")
    assert not user.email_verified
    assert Membership.objects.get(user=user).role == Role.OWNER
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ada@example.com"]

    # Before verifying, organization pages send the user back to the "check your inbox" page.
    slug = Membership.objects.get(user=user).organization.slug
    assert client.get(f"/o/{slug}/keys/")["Location"] == "/verify/"

    response = client.get(_link(mail.outbox[0].body))
    assert response.status_code == 302
    user.refresh_from_db()
    assert user.email_verified
    assert client.get("/")["Location"] == f"/o/{slug}/"


def test_signup_rejects_a_taken_address_and_a_weak_password_with_clear_messages(client, make_user):
    make_user("taken@example.com")
    response = client.post(
        "/signup/",
        {"email": "taken@example.com", "password": "12345678", "organization_name": "X"},
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "An account with this e-mail address already exists" in text
    assert "This password is entirely numeric" in text
    assert User.objects.count() == 1


def test_a_tampered_verification_link_is_refused(client, make_user):
    user = make_user("bob@example.com", verified=False)
    response = client.get("/verify/not-a-valid-token/")
    assert response.status_code == 400
    user.refresh_from_db()
    assert not user.email_verified


def test_login_logout_and_csrf_protected_forms(make_user):
    from django.test import Client

    make_user("carol@example.com")
    strict = Client(enforce_csrf_checks=True)
    page = strict.get("/login/")
    token = page.cookies["csrftoken"].value
    assert (
        strict.post("/login/", {"username": "carol@example.com", "password": "wrong"}).status_code
        == 403
    )  # no CSRF token → refused before the password is even checked
    response = strict.post(
        "/login/",
        {
            "username": "carol@example.com",
            "password": "correct horse battery",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    assert "_auth_user_id" in strict.session
    token = strict.cookies["csrftoken"].value
    strict.post("/logout/", {"csrfmiddlewaretoken": token})
    assert "_auth_user_id" not in strict.session


def test_password_reset_mails_a_link_that_sets_a_new_password(client, make_user):
    make_user("dan@example.com")
    client.post("/password-reset/", {"email": "dan@example.com"})
    assert len(mail.outbox) == 1
    link = _link(mail.outbox[0].body)
    form_page = client.get(link, follow=True)
    assert form_page.status_code == 200
    set_url = form_page.redirect_chain[-1][0]
    response = client.post(
        set_url, {"new_password1": "brand new passphrase", "new_password2": "brand new passphrase"}
    )
    assert response.status_code == 302
    assert User.objects.get(email="dan@example.com").check_password("brand new passphrase")
