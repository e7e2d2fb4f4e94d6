"""axe-core (tests/axe.py) on every page of the customer dashboard, in the light and the dark
theme, at desktop (1280×800) and phone (390×844) width: zero serious or critical violations.

The owner's organization has everything a page can show: keys, calls (one failed), top-ups,
projects, members, a pending invitation, the playground open with "View code", a flash message
(after creating a project), a new key shown once, forms refused with errors (help text and
errors tied to their field: sign-up, a key's limits), the security page with two-factor off and
on, and the login's code step. Public pages (sign-up, log-in, password reset, 404) are walked
logged out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django_otp.oath import totp
from playwright.sync_api import BrowserContext, Page, expect

from accounts import twofactor
from accounts.models import ApiKey
from inference.models import RequestStatus
from tests.axe import serious_violations
from tests.dashboard.factories import request_log_row
from tests.dashboard.test_browser import (  # noqa: F401  (fixtures used by name)
    _demo_organization,
    _login,
    _orm_beside_playwright,
    demo_catalog,
    fake_vendor,
)

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}

#: Pages of an organization (relative to /o/<slug>/); "{key}" / "{call}" / "{failed}" are
#: filled in with the demo's ids.
ORG_PAGES = (
    "",
    "start/",
    "api/",
    "projects/",
    "keys/",
    "keys/{key}/",
    "usage/",
    "usage/?split=key",
    "usage/requests/",
    "usage/requests/?status=failed",
    "usage/requests/{call}/",
    "usage/requests/{failed}/",
    "wallet/",
    "wallet/card/",
    "members/",
    "audit/",
    "playground/",
    "status/",
    "vectors/",
    "admin-keys/",
)
ACCOUNT_PAGES = ("/orgs/new/", "/account/security/")
PUBLIC_PAGES = ("/", "/login/", "/signup/", "/password-reset/", "/no-such-page/")


@pytest.fixture(
    params=[(w, s) for w in WIDTHS for s in ("light", "dark")], ids=lambda p: "-".join(p)
)
def themed(request: pytest.FixtureRequest, browser: Any, live_url: str) -> Iterator[BrowserContext]:
    """A browser context at one width in one colour scheme (what prefers-color-scheme says)."""
    width, scheme = request.param
    w, h = WIDTHS[width]
    ctx = browser.new_context(
        viewport={"width": w, "height": h}, color_scheme=scheme, base_url=live_url
    )
    yield ctx
    ctx.close()


def _settled(page: Page) -> None:
    """Wait until a live page re-rendered its regions once (the consumer's resync), so axe
    sees the page as it stays."""
    if page.locator("[data-live-region]").count():
        expect(page.locator("body[data-live=on]")).to_be_attached()
        page.wait_for_function(
            "parseInt(document.body.getAttribute('data-live-refreshes') || '0') > 0"
        )


def _check(page: Page, label: str, found: dict[str, list[dict[str, Any]]]) -> None:
    violations = serious_violations(page)
    if violations:
        found[label] = violations


@pytest.mark.usefixtures("demo_catalog")
def test_every_dashboard_page_has_no_serious_accessibility_violation(
    themed: BrowserContext, live_url: str
) -> None:
    owner, org = _demo_organization()
    key = ApiKey.objects.filter(organization=org).order_by("pk").first()
    assert key is not None
    call = request_log_row(organization_id=org.pk, routing={"mode": "auto", "why": "cheapest"})
    failed = request_log_row(
        organization_id=org.pk,
        status=RequestStatus.CLIENT_ERROR,
        http_status=401,
        error_code="invalid_api_key",
        routing={},
        model="",
        vendor="",
    )
    page = themed.new_page()
    found: dict[str, list[dict[str, Any]]] = {}

    for path in PUBLIC_PAGES:
        response = page.goto(path)
        assert response is not None, path
        assert "text/html" in response.headers["content-type"], (path, response.text()[:300])
        _check(page, path, found)
    page.goto("/signup/")  # refused: errors and help text beside their fields
    page.get_by_label("E-mail address").fill("not-an-address")
    page.get_by_label("Password").fill("123")
    page.get_by_role("button", name="Create account").click()
    expect(page.locator(".errorlist").first).to_be_visible()
    _check(page, "/signup/ (refused)", found)

    _login(themed, live_url, owner)
    for path in ACCOUNT_PAGES:
        page.goto(path)
        _check(page, path, found)
    for template in ORG_PAGES:
        path = f"/o/{org.slug}/" + template.format(
            key=key.pk, call=call.request_id, failed=failed.request_id
        )
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        _settled(page)
        if template == "playground/":
            page.get_by_role("button", name="Open the playground").click()
            page.get_by_text("View code", exact=True).click()
            expect(page.get_by_test_id("code-python")).to_contain_text("chat.completions")
        if template == "api/":
            expect(page.locator("#api-reference[data-rendered=yes]")).to_be_attached(timeout=20_000)
        _check(page, path, found)

    # A flash message (and the page it lands on).
    page.goto(f"/o/{org.slug}/projects/")
    page.get_by_label("Project name").fill("Flash")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("status").filter(has_text="Created project Flash.")).to_be_visible()
    _check(page, "flash message", found)
    page.get_by_label("Key name").fill("a11y")  # the key shown once, with its snippet
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_test_id("new-key")).to_be_visible()
    _check(page, "key created", found)
    page.goto(f"/o/{org.slug}/keys/{key.pk}/")  # a limit refused with the API's text
    page.get_by_label("Requests per minute").fill("0")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_requests_per_minute_error")).to_be_visible()
    _check(page, "key limits (refused)", found)
    page.goto(f"/o/{org.slug}/audit/")  # with the entries of the project and key made above
    expect(page.get_by_test_id("audit-log")).to_be_visible()
    _check(page, "audit log (entries)", found)

    # Two-factor on: the security page enrolled, then the login's code step.
    device = twofactor.enrollment_start(user=owner)
    assert twofactor.enrollment_confirm(user=owner, code=f"{totp(device.bin_key):06d}")
    page.goto("/account/security/")
    expect(page.get_by_test_id("2fa-status")).to_contain_text("On.")
    _check(page, "/account/security/ (enrolled)", found)
    themed.clear_cookies()
    page.goto("/login/")
    page.get_by_label("E-mail address").fill(owner.email)
    page.get_by_label("Password").fill("pw-demo-123")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_label("Authentication code")).to_be_visible()
    _check(page, "/login/code/", found)

    assert found == {}, _report(found)


def _report(found: dict[str, list[dict[str, Any]]]) -> str:
    """One line per page and rule: what failed, how often, where (the first elements)."""
    lines = []
    for label, violations in found.items():
        for v in violations:
            where = "; ".join(f"{n['target']} {n['html'][:120]}" for n in v["nodes"][:3])
            lines.append(f"{label}: {v['id']} ({v['impact']}) ×{len(v['nodes'])}: {where}")
    return "\n".join(lines)
