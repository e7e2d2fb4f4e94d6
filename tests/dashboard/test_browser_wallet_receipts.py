"""The wallet page's receipts and low-balance e-mail form in a real browser (Debian's chromium
through Playwright, against uvicorn), at desktop (1280×800) and phone (390×844) size: a top-up
in the ledger has a receipt whose link downloads a PDF naming its number and amount; the
threshold is saved from the page, and a refused value comes back on its field.

Set ``INFRAI_SCREENSHOTS=1`` to (re)write ``docs/screenshots/wallet-receipts*.png``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from accounts.models import Organization, Role, User
from accounts.services import membership_set, organization_create
from billing.models import EntryKind, Wallet
from billing.receipts import receipt_number
from billing.services.wallet import wallet_credit
from money.usd import NANOS_PER_USD
from tests.dashboard.test_browser import _login, _orm_beside_playwright  # noqa: F401
from tests.dashboard.test_statement_escaping import _pdf_text

pytestmark = pytest.mark.django_db(transaction=True)


LOW_BALANCE = "E-mail when the available balance falls below (USD)"


@pytest.fixture
def payer() -> tuple[User, Organization]:
    """A billing member of an organization that paid one Checkout top-up of $37.50."""
    user = User.objects.create_user("finance@payer.example", "pw-billing-123", email_verified=True)
    org = organization_create(name="Payer Corp")
    membership_set(organization=org, user=user, role=Role.BILLING)
    return user, org


def _fits(page: Page, where: str) -> None:
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], (where, sizes)


def test_a_top_ups_receipt_link_downloads_its_pdf(
    sized: BrowserContext, live_url: str, payer: tuple[User, Organization], shots: Path
) -> None:
    user, org = payer
    entry = wallet_credit(
        organization=org,
        amount_nanos=37_500_000_000,
        kind=EntryKind.TOPUP,
        idempotency_key="checkout:pi_browser_receipt",
        description="Top-up of $37.50 (Stripe Checkout)",
    )
    number = receipt_number(entry.pk)
    _login(sized, live_url, user)
    page = sized.new_page()
    page.goto(f"/o/{org.slug}/")
    page.get_by_role("link", name="Wallet").click()
    row = page.get_by_test_id("receipts").locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("$37.50")
    link = row.get_by_role("link", name=f"{number} (PDF)")
    expect(link).to_be_visible()
    _fits(page, "wallet")
    phone = sized.size == "phone"  # type: ignore[attr-defined]
    page.screenshot(
        path=shots / ("wallet-receipts-phone.png" if phone else "wallet-receipts.png"),
        full_page=True,
    )

    with page.expect_download() as download_info:
        link.click()
    download = download_info.value
    assert download.suggested_filename == f"infrai-receipt-{number}.pdf"
    pdf = Path(download.path()).read_bytes()
    assert pdf.startswith(b"%PDF")
    text = _pdf_text(pdf)
    assert number.encode() in text and b"37.5" in text and b"Payer Corp" in text

    # The same URL, as the browser's session fetches it: a PDF, sent as a download.
    href = link.get_attribute("href")
    assert href is not None
    response = sized.request.get(href)
    assert response.status == 200
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"].startswith("attachment;")
    assert _pdf_text(response.body()).count(number.encode()) == text.count(number.encode())


def test_the_low_balance_threshold_is_saved_and_a_refused_value_comes_back(
    sized: BrowserContext, live_url: str, payer: tuple[User, Organization]
) -> None:
    user, org = payer
    _login(sized, live_url, user)
    page = sized.new_page()
    page.goto(f"/o/{org.slug}/wallet/")
    form = page.get_by_test_id("low-balance-form")
    field = page.get_by_label(LOW_BALANCE)
    expect(field).to_have_value(re.compile(r"^1(\.0+)?$"))  # the default, $1
    # The label names this form's field, not the auto-recharge one of the same name.
    assert form.locator("input[name=threshold_usd]").evaluate(
        "(e, f) => e === f", field.element_handle()
    )
    field.fill("12.5")
    form.get_by_role("button", name="Save alert").click()
    expect(page.get_by_role("status")).to_contain_text("Saved the low-balance alert.")
    expect(page.get_by_label(LOW_BALANCE)).to_have_value(re.compile(r"^12\.50*$"))
    wallet = Wallet.objects.get(organization=org)
    assert (wallet.low_balance_threshold_nanos, wallet.low_balance_armed) == (
        12_500_000_000,
        True,
    )

    page.get_by_label(LOW_BALANCE).fill("-1")
    page.get_by_test_id("low-balance-form").get_by_role("button", name="Save alert").click()
    error = page.get_by_test_id("low-balance-form").locator(".errorlist")
    expect(error).to_contain_text("greater than or equal to 0")
    expect(page.get_by_label(LOW_BALANCE)).to_have_value("-1")
    described = page.get_by_label(LOW_BALANCE).get_attribute("aria-describedby") or ""
    assert error.get_attribute("id") in described.split()
    _fits(page, "refused low-balance")
    assert Wallet.objects.get(organization=org).low_balance_threshold_nanos == (
        12 * NANOS_PER_USD + NANOS_PER_USD // 2
    )
