"""Every page renders for the roles that may see it, with an empty state that says what next."""

from __future__ import annotations

import pytest

from accounts.models import Role

pytestmark = pytest.mark.django_db

PAGES_FOR_EVERYONE = ["", "start/", "members/", "projects/", "keys/", "usage/", "usage/requests/"]


@pytest.mark.parametrize("role", list(Role))
def test_pages_render_for_every_role(member_client, role):
    client, _, org = member_client(role)
    for path in PAGES_FOR_EVERYONE:
        response = client.get(f"/o/{org.slug}/{path}")
        assert response.status_code == 200, path
        assert b'id="content"' in response.content


def test_empty_states_point_to_the_next_step(member_client):
    client, _, org = member_client(Role.OWNER)
    assert "Create a project first." in client.get(f"/o/{org.slug}/").content.decode()
    assert "Create a <a" in client.get(f"/o/{org.slug}/keys/").content.decode()
    assert "No calls in this range." in client.get(f"/o/{org.slug}/usage/").content.decode()
    assert "No money has moved yet." in client.get(f"/o/{org.slug}/wallet/").content.decode()


@pytest.mark.parametrize("role", [Role.OWNER, Role.ADMIN, Role.BILLING])
def test_wallet_opens_for_billing_roles(member_client, role):
    client, _, org = member_client(role)
    assert client.get(f"/o/{org.slug}/wallet/").status_code == 200


def test_wallet_is_forbidden_to_members_and_hidden_from_their_navigation(member_client):
    client, _, org = member_client(Role.MEMBER)
    assert client.get(f"/o/{org.slug}/wallet/").status_code == 403
    assert (
        client.get(f"/o/{org.slug}/wallet/statement/?month=2026-01&format=csv").status_code == 403
    )
    assert client.post(f"/o/{org.slug}/wallet/topup/", {"amount": "10"}).status_code == 403
    assert f"/o/{org.slug}/wallet/" not in client.get(f"/o/{org.slug}/").content.decode()


def test_playground_is_for_key_users_only(member_client):
    client, _, org = member_client(Role.BILLING)
    assert client.get(f"/o/{org.slug}/playground/").status_code == 403
    client, _, org = member_client(Role.MEMBER)
    assert client.get(f"/o/{org.slug}/playground/").status_code == 200


def test_anonymous_users_are_sent_to_log_in(client, make_org):
    org = make_org()
    response = client.get(f"/o/{org.slug}/keys/")
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    assert "Create an account" in client.get("/").content.decode()


def test_unknown_pages_get_the_styled_404_page(client):
    page = client.get("/no-such-page/")
    assert page.status_code == 404
    assert "<h1>Page not found</h1>" in page.content.decode()
    assert 'rel="icon"' in page.content.decode()


def test_the_500_page_renders_without_a_request_context(rf):
    from django.views.defaults import server_error

    response = server_error(rf.get("/"))
    assert response.status_code == 500
    assert "Something went wrong on our side" in response.content.decode()


def test_static_files_and_the_favicon_are_served_with_debug_off(client, settings):
    assert settings.DEBUG is False
    css = client.get("/static/dashboard/app.css")
    assert css.status_code == 200
    assert b"".join(css.streaming_content if css.streaming else [css.content]).strip()
    favicon = client.get("/favicon.ico")
    assert favicon.status_code in (301, 302) and favicon["Location"].endswith("favicon.svg")
    assert client.get(favicon["Location"]).status_code == 200
