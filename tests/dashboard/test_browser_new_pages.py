"""The pages issue 31 added, in a real browser (Debian's chromium through Playwright, against
uvicorn) at desktop (1280×800) and phone (390×844) size, with the demo organization's month of
calls: the audit log, model status (with figures), usage split by model and by key, and
account security with two-factor off and on. Each shows its content, raises no script error
and does not scroll sideways.

Set ``INFRAI_SCREENSHOTS=1`` to (re)write their screenshots under ``docs/screenshots/``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from django_otp.oath import totp
from playwright.sync_api import Page, expect

from accounts import twofactor
from inference.models import RequestLog
from tests.dashboard.conftest import SIZES
from tests.dashboard.factories import request_log_row
from tests.dashboard.test_browser import (  # noqa: F401  (fixtures used by name)
    _demo_organization,
    _login,
    _orm_beside_playwright,
    demo_catalog,
    fake_vendor,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _fits(page: Page, where: str) -> None:
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], (where, sizes)


@pytest.mark.usefixtures("demo_catalog")
@pytest.mark.parametrize("size", list(SIZES))
def test_the_new_pages_show_their_content_and_fit(
    browser: Any, live_url: str, size: str, shots: Path
) -> None:
    owner, org = _demo_organization()
    now = timezone.now()
    RequestLog.objects.bulk_create(  # enough calls of the one routable model for figures
        [
            request_log_row(
                organization_id=org.pk,
                save=False,
                created_at=now - timedelta(minutes=n),
                model="demo-chat",
                vendor="demo",
                latency_ms=180 + 7 * n,
            )
            for n in range(30)
        ]
    )
    width, height = SIZES[size]
    ctx = browser.new_context(viewport={"width": width, "height": height}, base_url=live_url)
    suffix = "-phone" if size == "phone" else ""
    errors: list[str] = []
    try:
        page = ctx.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        _login(ctx, live_url, owner)

        # A change through the dashboard, so the audit log has the dashboard's own entry.
        page.goto(f"/o/{org.slug}/projects/")
        page.get_by_label("Project name").fill("Mobile")
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("status")).to_contain_text("Created project Mobile.")
        page.get_by_role("link", name="Audit log").click()
        log = page.get_by_test_id("audit-log")
        expect(log.locator("tbody tr").first).to_contain_text(owner.email)
        expect(log.locator("tbody tr").first).to_contain_text("Mobile")
        _fits(page, "audit")
        page.screenshot(path=shots / f"audit-log{suffix}.png", full_page=True)

        page.get_by_role("link", name="Model status").click()
        row = page.locator('tr[data-model="demo-chat"]')
        expect(row.get_by_test_id("state")).to_have_text("Operational")
        expect(row).to_contain_text("100.0%")
        _fits(page, "status")
        page.screenshot(path=shots / f"model-status{suffix}.png", full_page=True)

        for split in ("model", "key"):
            page.goto(f"/o/{org.slug}/usage/?split={split}")
            legend = page.get_by_test_id("chart-cost").locator(".tchart-legend li")
            names = legend.all_inner_texts()
            if split == "model":
                assert "gpt-4o-mini" in names, names
            else:
                assert {"production", "staging", "notebooks"} <= {n.split()[0] for n in names}
            _fits(page, f"usage by {split}")
            if split == "key" or size == "desktop":  # usage-phone.png is the model split
                page.screenshot(path=shots / f"usage-by-{split}{suffix}.png", full_page=True)

        page.goto("/account/security/")
        expect(page.get_by_test_id("2fa-status")).to_contain_text("Off.")
        _fits(page, "security off")
        if size == "desktop":
            page.screenshot(path=shots / "account-security-off.png", full_page=True)
        device = twofactor.enrollment_start(user=owner)
        assert twofactor.enrollment_confirm(user=owner, code=f"{totp(device.bin_key):06d}")
        page.reload()
        expect(page.get_by_test_id("2fa-status")).to_contain_text("On.")
        _fits(page, "security on")
        page.screenshot(path=shots / f"account-security{suffix}.png", full_page=True)
    finally:
        ctx.close()
    assert errors == []
