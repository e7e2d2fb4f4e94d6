"""Login throttling counts by the address uvicorn derived (never a header the client wrote) and
by the account: rotating ``X-Forwarded-For`` — through the trusted proxy's address or straight
at the server — or using many addresses never buys one account more than
``ACCOUNT_FAILURE_LIMIT`` wrong passwords (accounts/throttle.py)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import Client

from accounts.models import User
from accounts.throttle import ACCOUNT_FAILURE_LIMIT
from tests.live import uvicorn_server

PASSWORD = "correct horse battery"
_addresses = (f"198.18.{n // 250}.{n % 250 + 1}" for n in itertools.count())


def _user(email: str) -> User:
    return User.objects.create_user(email=email, password=PASSWORD, email_verified=True)


def _live_login(base: str, email: str, password: str, *, forwarded_for: str | None) -> int:
    """One login through the real server, as a browser does (CSRF cookie and form token)."""
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        page = http.get("/login/")
        assert page.status_code == 200
        token = http.cookies["csrftoken"]
        response = http.post(
            "/login/",
            data={"username": email, "password": password, "csrfmiddlewaretoken": token},
        )
        return response.status_code


def test_the_configured_handler_counts_by_account_too():
    assert settings.AXES_HANDLER == "accounts.throttle.LoginAttemptHandler"
    assert settings.AXES_IPWARE_META_PRECEDENCE_ORDER == ["REMOTE_ADDR"]
    assert settings.AXES_FAILURE_LIMIT < ACCOUNT_FAILURE_LIMIT


def test_rotating_x_forwarded_for_through_the_trusted_proxy_locks_the_account(
    live_url, transactional_db
):
    """From 127.0.0.1 (FORWARDED_ALLOW_IPS) each forged address is a new "client" to uvicorn:
    the account's own count still locks it, for every address, the right password included."""
    victim = _user("victim@example.com")
    bystander = _user("bystander@example.com")
    statuses = [
        _live_login(live_url, victim.email, "wrong", forwarded_for=next(_addresses))
        for _ in range(ACCOUNT_FAILURE_LIMIT + 2)
    ]
    assert statuses[: ACCOUNT_FAILURE_LIMIT - 1] == [200] * (ACCOUNT_FAILURE_LIMIT - 1)
    assert statuses[ACCOUNT_FAILURE_LIMIT - 1 :] == [429] * 3
    assert _live_login(live_url, victim.email, PASSWORD, forwarded_for=next(_addresses)) == 429
    assert _live_login(live_url, victim.email, PASSWORD, forwarded_for=None) == 429
    # Another account, from another address, is not affected.
    assert _live_login(live_url, bystander.email, PASSWORD, forwarded_for=next(_addresses)) == 302


@pytest.fixture
def untrusting_url(monkeypatch: pytest.MonkeyPatch, transactional_db: None) -> Iterator[str]:
    """The production server trusting a proxy that is not us: 127.0.0.1 is a plain client."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "192.0.2.1")
    with uvicorn_server() as url:
        yield url


def test_rotating_x_forwarded_for_straight_at_the_server_changes_nothing(untrusting_url):
    """From an address that is not a trusted proxy the header is ignored: the pair (user name,
    real address) locks at AXES_FAILURE_LIMIT whatever the header says."""
    victim = _user("direct@example.com")
    limit = settings.AXES_FAILURE_LIMIT
    statuses = [
        _live_login(untrusting_url, victim.email, "wrong", forwarded_for=next(_addresses))
        for _ in range(limit)
    ]
    assert statuses == [200] * (limit - 1) + [429]
    assert _live_login(untrusting_url, victim.email, PASSWORD, forwarded_for=None) == 429


def test_many_addresses_on_one_account_lock_that_account_only(db):
    victim = _user("many@example.com")
    other = _user("other@example.com")
    statuses = [
        Client(REMOTE_ADDR=next(_addresses))
        .post("/login/", {"username": victim.email, "password": "wrong"})
        .status_code
        for _ in range(ACCOUNT_FAILURE_LIMIT)
    ]
    assert statuses == [200] * (ACCOUNT_FAILURE_LIMIT - 1) + [429]
    fresh = Client(REMOTE_ADDR=next(_addresses))
    right = fresh.post("/login/", {"username": victim.email, "password": PASSWORD})
    assert right.status_code == 429
    # The same user name in another case is the same account.
    upper = Client(REMOTE_ADDR=next(_addresses))
    response = upper.post("/login/", {"username": victim.email.upper(), "password": "wrong"})
    assert response.status_code == 429
    # A legitimate user of another account, from another address, logs in.
    legit = Client(REMOTE_ADDR=next(_addresses))
    assert legit.post("/login/", {"username": other.email, "password": PASSWORD}).status_code == 302
    assert "_auth_user_id" in legit.session


def test_the_owner_logging_in_does_not_reset_the_accounts_count(db):
    """A success resets its own address's count only: an attacker elsewhere gets no fresh
    allowance because the owner logged in meanwhile."""
    user = _user("steady@example.com")
    for _ in range(ACCOUNT_FAILURE_LIMIT - 1):
        Client(REMOTE_ADDR=next(_addresses)).post(
            "/login/", {"username": user.email, "password": "wrong"}
        )
    owner = Client(REMOTE_ADDR=next(_addresses))
    assert owner.post("/login/", {"username": user.email, "password": PASSWORD}).status_code == 302
    attacker = Client(REMOTE_ADDR=next(_addresses))
    assert (
        attacker.post("/login/", {"username": user.email, "password": "wrong"}).status_code == 429
    )


def test_nginx_replaces_x_forwarded_for_with_the_peer_it_saw():
    conf = (Path(settings.BASE_DIR) / "deploy" / "nginx" / "infrai.conf").read_text()
    directives = [line.split("#")[0].strip() for line in conf.splitlines()]
    forwarded = [d for d in directives if re.match(r"proxy_set_header\s+X-Forwarded-For\b", d)]
    assert forwarded == ["proxy_set_header X-Forwarded-For $remote_addr;"]
    assert not any("$proxy_add_x_forwarded_for" in d for d in directives)
