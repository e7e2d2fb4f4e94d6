"""Fixtures of the dashboard tests: users, organizations with roles, and the browser."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import Browser, BrowserContext, BrowserType, Playwright, sync_playwright

from accounts.models import Organization, Role, User
from accounts.services import membership_set, organization_create


@pytest.fixture
def make_user(db: None) -> Callable[..., User]:
    def make(email: str = "ada@example.com", *, verified: bool = True) -> User:
        return User.objects.create_user(
            email=email, password="correct horse battery", email_verified=verified
        )

    return make


@pytest.fixture
def make_org(db: None) -> Callable[..., Organization]:
    def make(name: str = "Acme", *, owner: User | None = None) -> Organization:
        return organization_create(name=name, owner=owner)

    return make


@pytest.fixture
def member_client(
    make_user: Callable[..., User], make_org: Callable[..., Organization]
) -> Callable[..., tuple[Client, User, Organization]]:
    """``member_client(role, org=None)`` → a logged-in client whose user has ``role`` in org."""
    counter = {"n": 0}

    def make(
        role: Role = Role.OWNER, org: Organization | None = None
    ) -> tuple[Client, User, Organization]:
        counter["n"] += 1
        user = make_user(f"{role.value}{counter['n']}@example.com")
        org = org or make_org(f"Org {counter['n']}")
        membership_set(organization=org, user=user, role=role)
        client = Client()
        client.force_login(user)
        return client, user, org

    return make


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright for one test module only (pytest-playwright keeps it for the session).

    Its sync API runs an event loop on the main thread while it lives, and Django then refuses
    ORM calls there (``SynchronousOnlyOperation``). Scoped to the browser module, the loop is
    gone before any other test of the suite runs.
    """
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name)


@pytest.fixture(scope="module")
def browser(
    browser_type: BrowserType, browser_type_launch_args: dict[str, Any]
) -> Iterator[Browser]:
    launched = browser_type.launch(**browser_type_launch_args)
    yield launched
    launched.close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Debian's chromium (Playwright's own browser download does not work here)."""
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-quic",
        ],
    }


ROOT = Path(__file__).resolve().parents[2]
#: The two widths every page is checked at.
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where a test's screenshots go: ``docs/screenshots`` with ``INFRAI_SCREENSHOTS=1``, else a
    temporary folder."""
    if os.environ.get("INFRAI_SCREENSHOTS"):
        return ROOT / "docs" / "screenshots"
    return tmp_path


@pytest.fixture(params=list(SIZES))
def sized(request: pytest.FixtureRequest, browser: Any, live_url: str) -> Iterator[BrowserContext]:
    """A browser context at desktop or phone size (``ctx.size`` names it; downloads accepted)."""
    width, height = SIZES[request.param]
    ctx = browser.new_context(
        viewport={"width": width, "height": height}, base_url=live_url, accept_downloads=True
    )
    ctx.size = request.param  # type: ignore[attr-defined]
    yield ctx
    ctx.close()
