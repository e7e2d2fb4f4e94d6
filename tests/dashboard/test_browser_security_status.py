"""Two-factor authentication, the model status page and the usage charts in a real browser
(Debian's chromium through Playwright, against uvicorn), at desktop and phone sizes, with axe."""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django_otp.oath import TOTP
from playwright.sync_api import BrowserContext, Page, expect

from accounts.models import Organization, Role, User
from accounts.services import api_key_create, membership_set, organization_create, project_create
from catalog.documents import catalog_load
from catalog.models import Vendor
from inference.models import RequestLog
from tests.axe import serious_violations
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery"
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright(django_db_setup: None) -> Iterator[None]:
    """As in test_browser.py: Playwright's loop on this thread, the test's ORM calls sync."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _context(browser: Any, live_url: str, size: str) -> BrowserContext:
    width, height = SIZES[size]
    ctx: BrowserContext = browser.new_context(
        viewport={"width": width, "height": height}, base_url=live_url
    )
    return ctx


def _owner() -> tuple[User, Organization]:
    user = User.objects.create_user(
        email="owner@example.com", password=PASSWORD, email_verified=True
    )
    return user, organization_create(name="Acme", owner=user)


def _code(secret: str, *, steps_ahead: int = 0) -> str:
    """What an authenticator app shows for the page's secret (``steps_ahead`` steps from now)."""
    text = secret.replace(" ", "")
    key = base64.b32decode(text + "=" * (-len(text) % 8))
    totp = TOTP(key, step=30, t0=0, digits=6, drift=0)
    totp.time = time.time() + 30 * steps_ahead
    return f"{totp.token():06d}"


def _password(page: Page, email: str) -> None:
    page.goto("/login/")
    page.get_by_label("E-mail address").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def _no_overflow(page: Page, where: str) -> None:
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], (where, sizes)


def test_enroll_then_log_in_with_a_code_a_wrong_code_and_a_recovery_code_once(
    browser: Any, live_url: str
) -> None:
    user, org = _owner()
    ctx = _context(browser, live_url, "desktop")
    page = ctx.new_page()
    _password(page, user.email)
    expect(page).to_have_url(re.compile(f"/o/{org.slug}/$"))
    # Owners are offered two-factor on the overview.
    page.get_by_test_id("offer-2fa").get_by_role("link").click()
    expect(page.get_by_test_id("2fa-status")).to_contain_text("Off.")
    assert serious_violations(page) == []
    page.get_by_role("button", name="Set up two-factor authentication").click()
    expect(page.locator("figure.qr svg")).to_be_visible()
    assert serious_violations(page) == []
    secret = page.get_by_test_id("totp-secret").inner_text()
    page.get_by_label("Authentication code").fill(_code(secret))
    page.get_by_role("button", name="Turn on").click()
    codes = page.get_by_test_id("recovery-codes").locator("code").all_inner_texts()
    assert len(codes) == 10
    assert serious_violations(page) == []
    page.get_by_role("link", name="I have saved them").click()
    expect(page.get_by_test_id("2fa-status")).to_contain_text("On.")
    page.get_by_role("button", name="Log out").click()

    # The password alone is not enough: the code step, then the overview.
    _password(page, user.email)
    expect(page).to_have_url(re.compile("/login/code/$"))
    assert serious_violations(page) == []
    page.goto(f"/o/{org.slug}/")
    expect(page).to_have_url(re.compile("/login/"))  # not logged in between the two steps
    _password(page, user.email)
    page.get_by_label("Authentication code").fill(_code(secret, steps_ahead=1))
    page.get_by_role("button", name="Verify").click()
    expect(page).to_have_url(re.compile(f"/o/{org.slug}/$"))
    expect(page.get_by_test_id("offer-2fa")).to_have_count(0)
    page.get_by_role("button", name="Log out").click()

    # A wrong code is refused; a recovery code logs in, once.
    _password(page, user.email)
    page.get_by_label("Authentication code").fill("000000")
    page.get_by_role("button", name="Verify").click()
    expect(page.locator(".errorlist")).to_contain_text("That code is not right")
    page.get_by_label("Authentication code").fill(codes[0])
    page.get_by_role("button", name="Verify").click()
    expect(page).to_have_url(re.compile(f"/o/{org.slug}/$"))
    expect(page.locator(".messages")).to_contain_text("recovery code; 9 left")
    page.get_by_role("button", name="Log out").click()
    _password(page, user.email)
    page.get_by_label("Authentication code").fill(codes[0])
    page.get_by_role("button", name="Verify").click()
    expect(page.locator(".errorlist")).to_contain_text("That code is not right")
    expect(page).to_have_url(re.compile("/login/code/$"))
    ctx.close()


@pytest.fixture
def status_and_usage(live_url: str) -> tuple[User, Organization]:
    """A member's organization with calls of two models through two keys, over a catalog of
    two vendors; another organization's calls make the status figures."""
    Vendor.objects.update(enabled=False)
    vendors = [
        catalog_vendor(n, base_url=f"http://127.0.0.1:9/{n}", verified_models=["up"])
        for n in ("alpha", "beta")
    ]
    models = [
        catalog_model(
            "m-one",
            capabilities=["chat"],
            offerings=[offering("alpha", "up", PRICE), offering("beta", "up", PRICE)],
        ),
        catalog_model("m-two", capabilities=["chat"], offerings=[offering("beta", "up", PRICE)]),
    ]
    catalog_load({"vendors": vendors, "models": models})
    user, org = _owner()
    member = User.objects.create_user(
        email="member@example.com", password=PASSWORD, email_verified=True
    )
    membership_set(organization=org, user=member, role=Role.MEMBER)
    project = project_create(organization=org, name="Web")
    keys = [
        api_key_create(project=project, name=f"key {n} with a long name", created_by=user)[0]
        for n in range(2)
    ]
    other = organization_create(name="Other")
    now = timezone.now()
    RequestLog.objects.bulk_create(
        [
            request_log_row(
                organization_id=org.pk,
                save=False,
                created_at=now - timedelta(days=d, minutes=5),
                model=("m-one", "m-two")[d % 2],
                vendor=("alpha", "beta")[d % 2],
                api_key_id=keys[d % 2].pk,
                project_id=project.pk,
                cost_nanos=1_000_000 * (d + 1),
            )
            for d in range(29)
        ]
        + [
            request_log_row(
                organization_id=other.pk,
                save=False,
                created_at=now - timedelta(minutes=n),
                model="m-one",
                vendor="alpha",
                latency_ms=100 + n,
            )
            for n in range(25)
        ]
    )
    return member, org


@pytest.mark.parametrize("size", list(SIZES))
def test_model_status_and_usage_charts_fit_and_pass_axe(
    browser: Any, live_url: str, status_and_usage: tuple[User, Organization], size: str
) -> None:
    member, org = status_and_usage
    ctx = _context(browser, live_url, size)
    client = Client()
    client.force_login(member)
    ctx.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_url}]
    )
    page = ctx.new_page()
    page.goto(f"/o/{org.slug}/")
    page.get_by_role("link", name="Model status").click()
    expect(page.locator("h1")).to_have_text("Model status")
    row = page.locator('tr[data-model="m-one"]')
    expect(row.get_by_test_id("state")).to_have_text("Operational")
    expect(row).to_contain_text("100.0%")
    expect(page.locator('tr[data-model="m-two"]')).to_contain_text("too few calls")
    _no_overflow(page, "status")
    assert serious_violations(page) == []

    for split in ("model", "key"):
        page.goto(f"/o/{org.slug}/usage/?split={split}")
        chart = page.get_by_test_id("chart-cost")
        expect(chart.locator(".tchart-x span.last")).to_have_text("Today")
        # The y scale's top label and the first day's label are drawn inside the page.
        first = chart.locator(".tchart-x span.first").bounding_box()
        assert first is not None and first["x"] >= 0
        assert chart.locator(".tchart-y span").count() >= 3
        legend = chart.locator(".tchart-legend li").all_inner_texts()
        assert legend[0].startswith("key 0") if split == "key" else legend[0] == "m-one", legend
        _no_overflow(page, f"usage {split}")
        assert serious_violations(page) == []
    ctx.close()
