"""The admin pages staff use, in a real browser against the live app: zero serious or
critical axe-core violations on each, the model page within 1280 px, and the guardrail's
confirmation clicked through.

Set ``INFRAI_SCREENSHOTS=1`` to (re)write the admin screenshots under ``docs/screenshots/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from playwright.sync_api import BrowserContext, Page, expect

from accounts.models import User
from accounts.services import api_key_create, organization_create, project_create
from billing.models import LedgerEntry, Wallet
from billing.services.wallet import wallet_fund
from catalog.documents import SEED_PATH, catalog_load, read_document
from catalog.models import Model, Offering, Price, Vendor
from inference.models import RequestLog, RequestStatus
from tests.axe import serious_violations
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright(django_db_setup: None) -> Iterator[None]:
    """As in the dashboard's browser tests: Playwright's sync API keeps an event loop on this
    thread; the test's own ORM calls are plain sync code."""
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("INFRAI_SCREENSHOTS"):
        return ROOT / "docs" / "screenshots"
    return tmp_path


def _staff_context(browser: Any, live_url: str, viewport: dict[str, int]) -> BrowserContext:
    user = User.objects.create_superuser(
        email=f"ops{viewport['width']}@infrai.test", password="x-long-password"
    )
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport=viewport, base_url=live_url)
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_url}]
    )
    return context


@pytest.fixture
def desktop(browser: Any, live_url: str) -> Iterator[Page]:
    context = _staff_context(browser, live_url, DESKTOP)
    yield context.new_page()
    context.close()


@pytest.fixture
def phone(browser: Any, live_url: str) -> Iterator[Page]:
    context = _staff_context(browser, live_url, PHONE)
    yield context.new_page()
    context.close()


@pytest.fixture
def staff_world(db: None) -> dict[str, str]:
    """The shipped catalog, an organization with a member, a key, a funded wallet and two
    calls; returns the admin URLs staff open, by name."""
    catalog_load(read_document(SEED_PATH))
    owner = User.objects.create_user(email="owner@acme.test", password="x-long-password")
    org = organization_create(name="Acme Staffed", owner=owner)
    project = project_create(organization=org, name="web")
    key, _ = api_key_create(project=project, name="ci", created_by=owner)
    wallet_fund(organization=org, amount_nanos=5_000_000_000, idempotency_key="t:browser")
    request_log_row(organization_id=org.pk, request_id="req_browser_ok", api_key_id=key.pk)
    request_log_row(
        organization_id=org.pk,
        request_id="req_browser_503",
        status=RequestStatus.VENDOR_ERROR,
        http_status=503,
        error_code="no_routable_offering",
    )
    model = Model.objects.get(model_id="gpt-4o")
    vendor = Vendor.objects.get(name="openai")
    offering = Offering.objects.filter(vendor=vendor).first()
    price = Price.objects.filter(offering__vendor=vendor).first()
    assert offering is not None and price is not None
    wallet = Wallet.objects.get(organization=org)
    entry = LedgerEntry.objects.get(idempotency_key="t:browser")
    call = RequestLog.objects.get(request_id="req_browser_ok")

    def change(name: str, pk: int) -> str:
        return reverse(f"admin:{name}_change", args=[pk])

    return {
        "index": reverse("admin:index"),
        "models": reverse("admin:catalog_model_changelist"),
        "model": change("catalog_model", model.pk),
        "matrix": reverse("admin:catalog_model_matrix"),
        "vendors": reverse("admin:catalog_vendor_changelist"),
        "vendor": change("catalog_vendor", vendor.pk),
        "offerings": reverse("admin:catalog_offering_changelist"),
        "offering": change("catalog_offering", offering.pk),
        "prices": reverse("admin:catalog_price_changelist"),
        "price": change("catalog_price", price.pk),
        "price_add": reverse("admin:catalog_price_add"),
        "organizations": reverse("admin:accounts_organization_changelist"),
        "organization": change("accounts_organization", org.pk),
        "wallets": reverse("admin:billing_wallet_changelist"),
        "wallet": change("billing_wallet", wallet.pk),
        "ledger": reverse("admin:billing_ledgerentry_changelist"),
        "ledger_entry": change("billing_ledgerentry", entry.pk),
        "calls": reverse("admin:inference_requestlog_changelist"),
        "call": change("inference_requestlog", call.pk),
        "users": reverse("admin:accounts_user_changelist"),
        "user": change("accounts_user", owner.pk),
        "keys": reverse("admin:accounts_apikey_changelist"),
        "key": change("accounts_apikey", key.pk),
    }


def _no_serious_violations(page: Page, urls: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, url in urls.items():
        response = page.goto(url)
        assert response is not None and response.status == 200, (name, url)
        problems = serious_violations(page)
        if problems:
            found[name] = problems
    return found


def test_admin_pages_have_no_serious_accessibility_violations(
    desktop: Page, staff_world: dict[str, str], shots: Path
) -> None:
    assert _no_serious_violations(desktop, staff_world) == {}
    desktop.goto(staff_world["calls"])
    expect(desktop.get_by_role("link", name="req_browser_503")).to_be_visible()
    desktop.screenshot(path=shots / "admin-request-log.png", full_page=True)


def test_admin_pages_on_a_phone_have_no_serious_accessibility_violations(
    phone: Page, staff_world: dict[str, str]
) -> None:
    pages = ("index", "model", "vendor", "organization", "price_add", "calls", "ledger")
    assert _no_serious_violations(phone, {n: staff_world[n] for n in pages}) == {}


def _overflow(page: Page) -> dict[str, int]:
    return page.evaluate(
        "() => ({scroll: document.documentElement.scrollWidth,"
        " client: document.documentElement.clientWidth})"
    )


def test_the_model_page_fits_1280_px(desktop: Page, staff_world: dict[str, str], shots: Path):
    for name in ("model", "vendor", "offering"):
        desktop.goto(staff_world[name])
        width = _overflow(desktop)
        assert width["scroll"] <= width["client"], (name, width)
    desktop.goto(staff_world["model"])
    desktop.screenshot(path=shots / "admin-model.png", full_page=True)


def test_the_guardrail_asks_then_saves_when_confirmed(desktop: Page, shots: Path) -> None:
    """Only demo-chat serves chat; unticking its capabilities asks first."""
    Vendor.objects.update(enabled=False)
    catalog_load(
        {
            "vendors": [
                catalog_vendor("solo", base_url="http://127.0.0.1:9/v1", verified_models=["c"])
            ],
            "models": [
                catalog_model(
                    "demo-chat", capabilities=["chat"], offerings=[offering("solo", "c", PRICE)]
                )
            ],
        }
    )
    model = Model.objects.get(model_id="demo-chat")
    desktop.goto(reverse("admin:catalog_model_change", args=[model.pk]))
    desktop.get_by_role("checkbox", name="Chat", exact=True).uncheck()
    desktop.get_by_role("button", name="Save", exact=True).click()
    expect(desktop.get_by_role("heading", name="This stops routing")).to_be_visible()
    expect(desktop.get_by_role("alert")).to_contain_text(
        "chat (Chat) — served until now by demo-chat"
    )
    assert serious_violations(desktop) == []
    desktop.screenshot(path=shots / "admin-guardrail.png", full_page=True)
    model.refresh_from_db()
    assert model.capabilities == ["chat"]
    desktop.get_by_role("link", name="No, keep the catalog as it is").click()
    expect(desktop.get_by_role("checkbox", name="Chat", exact=True)).to_be_checked()
    desktop.get_by_role("checkbox", name="Chat", exact=True).uncheck()
    desktop.get_by_role("button", name="Save", exact=True).click()
    desktop.get_by_role("button", name="Yes, save anyway").click()
    expect(desktop.locator(".messagelist")).to_contain_text("was changed successfully")
    model.refresh_from_db()
    assert model.capabilities == []
