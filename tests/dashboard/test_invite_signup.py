"""An invitation survives sign-up: no organization of one's own, and after verifying the address
the new user lands on the invitation and joins the inviting organization."""

from __future__ import annotations

import re

import pytest
from django.core import mail

from accounts.models import Membership, Role, User
from accounts.services import invitation_create

pytestmark = pytest.mark.django_db


def test_an_invited_person_without_an_account_signs_up_and_joins_the_inviting_organization(
    client, make_user, make_org
):
    owner = make_user("owner@example.com")
    org = make_org("Inviting", owner=owner)
    _, token = invitation_create(
        organization=org, email="newbie@example.com", role=Role.MEMBER, invited_by=owner
    )
    invite = f"/invite/{token}/"
    login = client.get(invite)
    assert login.status_code == 302 and login["Location"].startswith("/login/")
    login_page = client.get(login["Location"]).content.decode()
    signup_url = re.search(r'href="(/signup/\?next=[^"]+)"', login_page)
    assert signup_url is not None
    page = client.get(signup_url.group(1).replace("&amp;", "&")).content.decode()
    assert "Inviting" in page and "newbie@example.com" in page
    assert 'name="organization_name"' not in page
    response = client.post(
        "/signup/",
        {"email": "newbie@example.com", "password": "a long passphrase", "next": invite},
    )
    assert response.status_code == 302
    user = User.objects.get(email="newbie@example.com")
    assert not Membership.objects.filter(user=user).exists()  # no forced organization
    link = re.search(r"https?://\S+/verify/\S+/", mail.outbox[-1].body)
    assert link is not None
    after = client.get(link.group(0), follow=True)
    assert after.redirect_chain[-1][0] == invite
    joined = client.post(invite)
    assert joined["Location"] == f"/o/{org.slug}/"
    assert Membership.objects.get(user=user).organization == org


def test_a_next_that_is_not_an_invitation_is_ignored(client):
    page = client.get("/signup/?next=https://evil.example/").content.decode()
    assert 'name="organization_name"' in page and "evil.example" not in page
