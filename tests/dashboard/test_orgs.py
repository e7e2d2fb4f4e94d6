"""Organizations: create, switch, members, roles, invitations; every action checks the role."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client

from accounts.models import Invitation, Membership, Role

pytestmark = pytest.mark.django_db(transaction=False)


def test_create_and_switch_organizations(member_client):
    client, user, org = member_client(Role.MEMBER)
    response = client.post("/orgs/new/", {"name": "Second Co"})
    second = Membership.objects.get(user=user, role=Role.OWNER).organization
    assert response["Location"] == f"/o/{second.slug}/"
    assert client.get(f"/orgs/switch/?org={org.slug}")["Location"] == f"/o/{org.slug}/"
    page = client.get(f"/o/{org.slug}/").content.decode()
    assert "Second Co" in page and org.name in page  # both in the switcher


def test_non_member_gets_404_for_every_page_of_another_organization(member_client, make_org):
    client, _, _ = member_client(Role.OWNER)
    other = make_org("Secret Inc")
    for path in ("", "members/", "projects/", "keys/", "usage/", "usage/requests/", "wallet/"):
        assert client.get(f"/o/{other.slug}/{path}").status_code == 404, path


def test_invitation_mail_accept_gives_the_role(
    member_client, make_user, django_capture_on_commit_callbacks
):
    client, _, org = member_client(Role.ADMIN)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/o/{org.slug}/members/invite/", {"email": "New@Example.com", "role": "billing"}
        )
    assert response.status_code == 302
    assert mail.outbox[0].to == ["new@example.com"]
    path = re.search(r"https?://testserver(\S+)", mail.outbox[0].body).group(1)

    invitee = make_user("new@example.com")
    other = Client()
    other.force_login(invitee)
    assert other.post(path)["Location"] == f"/o/{org.slug}/"
    assert Membership.objects.get(user=invitee, organization=org).role == Role.BILLING
    # The link is single-use.
    assert other.post(path).status_code == 404


def test_invitation_is_bound_to_the_invited_address(
    member_client, make_user, django_capture_on_commit_callbacks
):
    client, _, org = member_client(Role.OWNER)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/o/{org.slug}/members/invite/", {"email": "a@example.com", "role": "member"})
    path = re.search(r"https?://testserver(\S+)", mail.outbox[0].body).group(1)
    intruder = Client()
    intruder.force_login(make_user("mallory@example.com"))
    response = intruder.post(path)
    assert "This invitation was sent to a@example.com." in response.content.decode()
    assert not Membership.objects.filter(organization=org, user__email="mallory@example.com")


@pytest.mark.parametrize("role", [Role.MEMBER, Role.BILLING])
def test_members_cannot_invite_change_roles_or_remove(member_client, role):
    client, _, org = member_client(role)
    _, victim, _ = member_client(Role.MEMBER, org=org)
    victim_m = Membership.objects.get(user=victim, organization=org)
    assert (
        client.post(
            f"/o/{org.slug}/members/invite/", {"email": "x@example.com", "role": "member"}
        ).status_code
        == 403
    )
    assert (
        client.post(f"/o/{org.slug}/members/{victim_m.pk}/role/", {"role": "admin"}).status_code
        == 403
    )
    assert client.post(f"/o/{org.slug}/members/{victim_m.pk}/remove/").status_code == 403
    assert not Invitation.objects.exists()
    victim_m.refresh_from_db()
    assert victim_m.role == Role.MEMBER


def test_admin_cannot_touch_an_owner_nor_grant_ownership(member_client):
    _, owner, org = member_client(Role.OWNER)
    admin_client, _, _ = member_client(Role.ADMIN, org=org)
    _, member, _ = member_client(Role.MEMBER, org=org)
    owner_m = Membership.objects.get(user=owner, organization=org)
    member_m = Membership.objects.get(user=member, organization=org)
    assert admin_client.post(f"/o/{org.slug}/members/{owner_m.pk}/remove/").status_code == 403
    admin_client.post(f"/o/{org.slug}/members/{member_m.pk}/role/", {"role": "owner"})
    member_m.refresh_from_db()
    assert member_m.role == Role.MEMBER  # "owner" is not a choice for admins
    admin_client.post(f"/o/{org.slug}/members/{member_m.pk}/role/", {"role": "billing"})
    member_m.refresh_from_db()
    assert member_m.role == Role.BILLING


def test_the_last_owner_cannot_leave_or_be_demoted(member_client):
    client, owner, org = member_client(Role.OWNER)
    owner_m = Membership.objects.get(user=owner, organization=org)
    response = client.post(f"/o/{org.slug}/members/{owner_m.pk}/remove/", follow=True)
    assert "An organization needs at least one owner." in response.content.decode()
    client.post(f"/o/{org.slug}/members/{owner_m.pk}/role/", {"role": "member"})
    owner_m.refresh_from_db()
    assert owner_m.role == Role.OWNER


def test_owner_removes_a_member(member_client):
    client, _, org = member_client(Role.OWNER)
    _, member, _ = member_client(Role.MEMBER, org=org)
    m = Membership.objects.get(user=member, organization=org)
    client.post(f"/o/{org.slug}/members/{m.pk}/remove/")
    assert not Membership.objects.filter(pk=m.pk).exists()
