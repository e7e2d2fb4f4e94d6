"""Login throttling (django-axes): repeated wrong passwords lock the user name from that
address out of the dashboard's and the admin's login, even with the right password."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

PASSWORD = "correct horse battery"


def _attempt(client: Client, path: str, email: str, password: str):
    return client.post(path, {"username": email, "password": password})


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_repeated_wrong_passwords_lock_out_that_user_from_that_address(make_user, path):
    user = make_user("carol@example.com")
    if path.startswith("/admin/"):
        user.is_staff = True
        user.save()
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = _attempt(attacker, path, user.email, "wrong password")
        assert response.status_code == 200  # the form again, with its error
    assert _attempt(attacker, path, user.email, "wrong password").status_code == 429
    locked = _attempt(attacker, path, user.email, PASSWORD)
    assert locked.status_code == 429
    assert "_auth_user_id" not in attacker.session
    # The same user from another address, and another user, still log in.
    elsewhere = Client(REMOTE_ADDR="198.51.100.9")
    assert _attempt(elsewhere, path, user.email, PASSWORD).status_code == 302
    other = make_user("dave@example.com")
    assert (
        _attempt(Client(REMOTE_ADDR="203.0.113.7"), "/login/", other.email, PASSWORD).status_code
        == 302
    )


def test_a_successful_login_resets_the_count(make_user):
    user = make_user("erin@example.com")
    client = Client(REMOTE_ADDR="203.0.113.8")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _attempt(client, "/login/", user.email, "wrong password")
    assert _attempt(client, "/login/", user.email, PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _attempt(client, "/login/", user.email, "wrong password")
    assert _attempt(client, "/login/", user.email, PASSWORD).status_code == 302
