"""The key page's monthly budget and rate limits in a real browser (Debian's chromium through
Playwright, against uvicorn), at desktop (1280×800) and phone (390×844) size: an owner sets
them and reads them back with this month's spend; a value out of bounds, and a member raising
a limit above :data:`accounts.policy.MEMBER_KEY_CEILING`, are refused on the field with the
text the management API answers for the same change (asked of the same live server).

Set ``INFRAI_SCREENSHOTS=1`` to (re)write ``docs/screenshots/key-limits*.png``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from accounts.models import ApiKey, Organization, Project, Role, User
from accounts.policy import MEMBER_KEY_CEILING, Actor
from accounts.services import (
    api_key_issue,
    membership_change_role,
    membership_set,
    organization_create,
    project_create,
)
from billing.services import hold_open, hold_settle
from billing.services.wallet import wallet_fund
from management.services import admin_key_create
from money.usd import NANOS_PER_USD
from tests.dashboard.test_browser import _login, _orm_beside_playwright  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world() -> tuple[User, Organization, Project]:
    owner = User.objects.create_user("owner@limits.example", "pw-owner-123", email_verified=True)
    org = organization_create(name="Limits Ltd", owner=owner)
    wallet_fund(organization=org, amount_nanos=20 * NANOS_PER_USD, idempotency_key="fund")
    return owner, org, project_create(organization=org, name="Backend")


def _fits(page: Page, where: str) -> None:
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], (where, sizes)


def _spend(key: ApiKey, request_id: str, nanos: int) -> None:
    """One settled call of ``nanos`` on ``key`` this month."""
    hold_open(
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.pk,
        request_id=request_id,
        amount_nanos=NANOS_PER_USD,
    )
    hold_settle(request_id=request_id, actual_nanos=nanos)


def _api_message(
    live_url: str, org: Organization, user: User, role: Role, key: ApiKey, body: dict
) -> str:
    """What the management API answers (400/403) for ``body`` on ``key``, asked with an admin
    key of ``user`` acting as ``role``."""
    membership = membership_set(organization=org, user=user, role=Role.ADMIN)
    _, raw = admin_key_create(organization=org, created_by=user)
    if role != Role.ADMIN:
        membership_change_role(membership=membership, role=role)
    response = httpx.post(
        f"{live_url}/v1/organization/projects/proj_{key.project_id}/api_keys/key_{key.pk}",
        json=body,
        headers={"Authorization": f"Bearer {raw}"},
    )
    assert response.status_code in (400, 403), response.text
    return str(response.json()["error"]["message"])


def _open_key(page: Page, org: Organization, key: ApiKey) -> None:
    """From the key list to the key's page, as a person would."""
    page.goto(f"/o/{org.slug}/keys/")
    page.get_by_role("link", name=f"Edit {key.display}").click()
    expect(page.get_by_role("heading", name="Limits now")).to_be_visible()


def test_an_owner_sets_a_budget_and_rate_limits_and_sees_them_with_the_months_spend(
    sized: BrowserContext, live_url: str, world: tuple[User, Organization, Project], shots: Path
) -> None:
    owner, org, project = world
    key, _ = api_key_issue(actor=Actor(user=owner, role=Role.OWNER), project=project, name="prod")
    _spend(key, "r-limits-1", 125_000_000)  # $0.125 this month
    _login(sized, live_url, owner)
    page = sized.new_page()
    _open_key(page, org, key)
    expect(page.get_by_test_id("key-budget")).to_contain_text("none of its own")
    expect(page.get_by_test_id("key-spent")).to_have_text("$0.125")

    page.get_by_label("Requests per minute").fill("30")
    page.get_by_label("Tokens per minute").fill("9000")
    page.get_by_label("Monthly budget (USD)").fill("4.5")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text(f"Saved key {key.display}.")
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_minute, key.monthly_budget_nanos) == (
        30,
        9000,
        4_500_000_000,
    )
    _open_key(page, org, key)
    expect(page.get_by_test_id("key-rpm")).to_have_text("30")
    expect(page.get_by_test_id("key-tpm")).to_have_text("9000")
    expect(page.get_by_test_id("key-budget")).to_have_text("$4.50")
    expect(page.get_by_test_id("key-spent")).to_have_text("$0.125 of $4.50")
    expect(page.get_by_label("Monthly budget (USD)")).to_have_value("4.5")
    _fits(page, "key page")
    phone = sized.size == "phone"  # type: ignore[attr-defined]
    page.screenshot(
        path=shots / ("key-limits-phone.png" if phone else "key-limits.png"), full_page=True
    )

    # Out of bounds: refused on its field with the management API's text; nothing saved.
    api = _api_message(live_url, org, User.objects.create_user("a@limits.example"), Role.ADMIN, key,
                       {"requests_per_minute": 0})  # fmt: skip
    assert api.startswith("Invalid 'requests_per_minute': ")
    page.get_by_label("Requests per minute").fill("0")
    page.get_by_role("button", name="Save").click()
    error = page.locator("#id_requests_per_minute_error")
    expect(error).to_have_text(api.split(": ", 1)[1])
    expect(page.get_by_label("Requests per minute")).to_have_attribute(
        "aria-describedby", "id_requests_per_minute_helptext id_requests_per_minute_error"
    )
    _fits(page, "refused key page")
    key.refresh_from_db()
    assert key.requests_per_minute == 30

    # Emptying the budget removes it (an owner may).
    page.get_by_label("Requests per minute").fill("30")
    page.get_by_label("Monthly budget (USD)").fill("")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved key")
    key.refresh_from_db()
    assert key.monthly_budget_nanos is None


def test_a_member_is_refused_above_the_members_ceiling_with_the_apis_text(
    sized: BrowserContext, live_url: str, world: tuple[User, Organization, Project]
) -> None:
    _, org, project = world
    member = User.objects.create_user("dev@limits.example", "pw-member-123", email_verified=True)
    membership_set(organization=org, user=member, role=Role.MEMBER)
    key, _ = api_key_issue(actor=Actor(user=member, role=Role.MEMBER), project=project, name="mine")
    ceiling = MEMBER_KEY_CEILING.monthly_budget_nanos
    assert ceiling is not None and key.monthly_budget_nanos == ceiling
    _login(sized, live_url, member)
    page = sized.new_page()
    _open_key(page, org, key)
    expect(page.get_by_test_id("key-budget")).to_have_text("$10.00")
    expect(page.get_by_text("only an owner or admin raises or removes them")).to_be_visible()

    above = str(ceiling // NANOS_PER_USD + 1)  # $11
    api = _api_message(live_url, org, member, Role.MEMBER, key, {"monthly_budget_usd": above})
    assert "may not give a key 'monthly_budget_usd' above" in api
    page.get_by_label("Monthly budget (USD)").fill(above)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_monthly_budget_usd_error")).to_have_text(api)
    expect(page.get_by_test_id("key-budget")).to_have_text("$10.00")
    _fits(page, "member refused")

    rpm = MEMBER_KEY_CEILING.requests_per_minute + 1
    api = _api_message(live_url, org, member, Role.MEMBER, key, {"requests_per_minute": rpm})
    page.get_by_label("Monthly budget (USD)").fill("10")
    page.get_by_label("Requests per minute").fill(str(rpm))
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_requests_per_minute_error")).to_have_text(api)
    key.refresh_from_db()
    assert (key.monthly_budget_nanos, key.requests_per_minute) == (ceiling, 600)

    # Lowering is a member's right.
    page.get_by_label("Requests per minute").fill("60")
    page.get_by_label("Monthly budget (USD)").fill("3")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved key")
    key.refresh_from_db()
    assert (key.monthly_budget_nanos, key.requests_per_minute) == (3 * NANOS_PER_USD, 60)
