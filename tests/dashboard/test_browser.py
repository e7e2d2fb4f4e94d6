"""The dashboard in a real browser (Debian's chromium through Playwright) against the whole ASGI
app served by uvicorn (static files by WhiteNoise, as in production): sign-up to a first call,
the playground, live pages against a reload, Checkout top-up, roles, isolation, phone layout.

Set ``INFRAI_SCREENSHOTS=1`` to (re)write the screenshots under ``docs/screenshots/``;
otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import stripe
from django.core import mail
from django.test import Client
from playwright.sync_api import BrowserContext, Page, Route, expect

from accounts.models import ApiKey, Membership, Organization, Role, User
from accounts.services import api_key_create, membership_set, project_create
from billing import stripe_gateway
from billing.models import Wallet
from billing.stripe_gateway import CheckoutSession
from catalog.documents import catalog_load
from catalog.models import Vendor
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.dashboard.factories import request_log_row
from tests.fakes.vendors import FakeVendor

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_URL = "https://checkout.stripe.test/c/pay/cs_test_browser"
WEBHOOK_SECRET = "whsec_dashboard_browser_test"


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright(django_db_setup: None) -> Iterator[None]:
    """Playwright's sync API keeps an event loop on this thread; the test's own ORM calls are
    still plain sync code, so Django's async-safety guard is lifted for this module only.
    (Requesting ``django_db_setup`` first creates the test database before that loop runs.)"""
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
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return tmp_path


@pytest.fixture
def context(browser: Any, live_url: str) -> Iterator[BrowserContext]:
    ctx = browser.new_context(
        viewport={"width": 1280, "height": 860},
        permissions=["clipboard-read", "clipboard-write"],
        base_url=live_url,
    )
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture(scope="module")
def fake_vendor() -> Iterator[FakeVendor]:
    with FakeVendor(models=["up-demo"]) as server:
        yield server


@pytest.fixture
def demo_catalog(fake_vendor: FakeVendor) -> None:
    """Only one routable model, ``demo-chat``, served by a fake vendor on 127.0.0.1."""
    Vendor.objects.update(enabled=False)
    vendor = catalog_vendor(
        "demo", display_name="Demo", base_url=fake_vendor.url, verified_models=fake_vendor.models
    )
    model = catalog_model(
        "demo-chat", capabilities=["chat"], offerings=[offering("demo", "up-demo", PRICE)]
    )
    catalog_load({"vendors": [vendor], "models": [model]})


@pytest.fixture
def fake_checkout(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[dict[str, Any]]:
    """Stripe faked at billing's one Stripe module (localstripe has no Checkout Sessions)."""
    settings.STRIPE_SECRET_KEY = "sk_test_dashboard"
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    sessions: list[dict[str, Any]] = []

    def checkout_session_create(**kwargs: Any) -> CheckoutSession:
        sessions.append(kwargs)
        return CheckoutSession(id="cs_test_browser", url=CHECKOUT_URL)

    monkeypatch.setattr(stripe_gateway, "customer_create", lambda **_: "cus_test_browser")
    monkeypatch.setattr(
        stripe_gateway, "payment_method_attach", lambda **kw: kw["payment_method_id"]
    )
    monkeypatch.setattr(stripe_gateway, "checkout_session_create", checkout_session_create)
    return sessions


def _stripe_page(route: Route) -> None:
    """Stand-in for Stripe's hosted Checkout page."""
    route.fulfill(
        content_type="text/html",
        body="<!doctype html><title>Stripe Checkout (fake)</title><h1>Pay infrai</h1>"
        "<button id='pay'>Pay</button>",
    )


def _send_paid_webhook(live_url: str, session: dict[str, Any]) -> httpx.Response:
    """What Stripe sends when the Checkout is paid, signed with the real scheme."""
    event = {
        "id": "evt_test_browser_paid",
        "object": "event",
        "type": "checkout.session.completed",
        "created": int(time.time()),
        "livemode": False,
        "data": {
            "object": {
                "id": "cs_test_browser",
                "object": "checkout.session",
                "payment_status": "paid",
                "amount_total": session["amount_nanos"] // 10_000_000,
                "currency": "usd",
                "customer": session["customer_id"],
                "client_reference_id": str(session["organization_id"]),
                "metadata": {"organization_id": str(session["organization_id"])},
                "payment_intent": "pi_test_browser",
            }
        },
    }
    return _signed_post(live_url, event)


def _signed_post(live_url: str, event: dict[str, Any]) -> httpx.Response:
    """``event`` posted to the Stripe webhook, signed with the real scheme."""
    payload = json.dumps(event)
    timestamp = int(time.time())
    signature = stripe.WebhookSignature._compute_signature(f"{timestamp}.{payload}", WEBHOOK_SECRET)
    return httpx.post(
        f"{live_url}/billing/stripe/webhook",
        content=payload.encode(),
        headers={
            "Stripe-Signature": f"t={timestamp},v1={signature}",
            "Content-Type": "application/json",
        },
    )


def _send_card_saved_webhook(live_url: str, session: dict[str, Any]) -> httpx.Response:
    """The top-up's ``payment_intent.succeeded``: Checkout saved the card for off-session use."""
    return _signed_post(
        live_url,
        {
            "id": "evt_test_browser_pi",
            "object": "event",
            "type": "payment_intent.succeeded",
            "created": int(time.time()),
            "livemode": False,
            "data": {
                "object": {
                    "id": "pi_test_browser",
                    "object": "payment_intent",
                    "amount": session["amount_nanos"] // 10_000_000,
                    "currency": "usd",
                    "customer": session["customer_id"],
                    "payment_method": "pm_browser",
                    "setup_future_usage": "off_session",
                    "metadata": {
                        "organization_id": str(session["organization_id"]),
                        "infrai_kind": "topup",
                    },
                }
            },
        },
    )


def test_signup_to_first_call_live_usage_and_a_checkout_top_up(
    page: Page,
    context: BrowserContext,
    live_url: str,
    mailoutbox: list[Any],
    demo_catalog: None,
    fake_checkout: list[dict[str, Any]],
    shots: Path,
) -> None:
    # Sign up.
    page.goto("/signup/")
    page.get_by_label("E-mail address").fill("grace@example.com")
    page.get_by_label("Password").fill("a long passphrase")
    page.get_by_label("Organization name").fill("Hopper Labs")
    page.screenshot(path=shots / "signup.png")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("heading", name="Check your inbox")).to_be_visible()

    # Verify: the link from the e-mail. The organization gets its starter credit then.
    assert len(mail.outbox) == 1
    link = re.search(r"http://\S+", mail.outbox[0].body).group(0)
    page.goto(link)
    expect(page.get_by_text("Your e-mail address is verified.")).to_be_visible()
    expect(page.get_by_text("$0.50 of starter credit")).to_be_visible()
    expect(page.get_by_role("heading", name="Hopper Labs")).to_be_visible()
    assert User.objects.get(email="grace@example.com").email_verified

    # A project, then a key.
    page.get_by_role("link", name="Create a project").click()
    page.get_by_label("Project name").fill("Backend")
    page.get_by_label("Monthly budget (USD)").fill("50")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_text("Created project Backend.")).to_be_visible()
    page.get_by_label("Key name").fill("laptop")
    page.get_by_role("button", name="Create key").click()
    key_text = page.get_by_test_id("new-key").inner_text().strip()
    page.get_by_role("button", name="Copy", exact=True).click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == key_text and copied.startswith("ifr_")
    page.screenshot(path=shots / "key-created.png", full_page=True)

    # The first call, with nothing but the dashboard: the playground, on the starter credit.
    page.get_by_role("link", name="Playground").click()
    page.get_by_role("button", name="Open the playground").click()
    page.get_by_label("Model or routing mode").select_option("demo-chat")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#answer-meta")).to_contain_text("vendor demo")
    assert page.locator("#conversation li[data-role=assistant]").inner_text().strip()

    # The copied key works with the official SDK.
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key=copied, max_retries=0)
    assert "demo-chat" in [m.id for m in client.models.list()]

    # The first call works on the starter credit alone: no operator, no payment yet.
    first = client.chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "First call"}]
    )
    assert first.choices[0].message.content

    # Top up through Checkout: the redirect leaves our site, Stripe pays, the webhook credits.
    context.route("https://checkout.stripe.test/**", _stripe_page)
    page.get_by_role("link", name="Wallet").click()
    starter = page.get_by_test_id("balance").inner_text()
    assert starter.startswith("$0.4")  # $0.50 less the first call
    expect(page.get_by_test_id("recharge-reason")).to_be_visible()
    expect(page.get_by_label("Recharge automatically")).to_be_disabled()
    expect(page.get_by_role("button", name="Save auto-recharge")).to_be_disabled()
    page.get_by_label("$25").check()
    page.get_by_role("button", name="Continue to payment").click()
    expect(page.get_by_role("heading", name="Pay infrai")).to_be_visible()
    assert fake_checkout[0]["amount_nanos"] == 25_000_000_000
    assert _send_paid_webhook(live_url, fake_checkout[0]).status_code == 200
    page.goto(fake_checkout[0]["success_url"])  # Stripe's redirect back
    expect(page.get_by_test_id("topup-notice")).to_be_visible()
    expect(page.get_by_test_id("balance")).not_to_have_text(starter)
    assert fake_checkout[0]["amount_nanos"] == 25_000_000_000
    balance = Wallet.objects.get(organization__name="Hopper Labs").balance_nanos
    assert 25_400_000_000 < balance < 25_500_000_000

    # The payment saved the card (setup_future_usage): now auto-recharge can be switched on.
    assert _send_card_saved_webhook(live_url, fake_checkout[0]).status_code == 200
    page.reload()
    expect(page.get_by_test_id("recharge-reason")).to_have_count(0)
    page.get_by_label("Recharge automatically").check()
    page.get_by_label("When the balance falls below (USD)").fill("5")
    page.get_by_label("Add (USD)").fill("20")
    page.get_by_role("button", name="Save auto-recharge").click()
    expect(page.get_by_text("Saved the auto-recharge settings.")).to_be_visible()
    wallet = Wallet.objects.get(organization__name="Hopper Labs")
    assert wallet.auto_recharge_enabled and wallet.auto_recharge_payment_method_id == "pm_browser"

    # A chat completion with the SDK appears on the usage page without a reload.
    page.get_by_role("link", name="Usage").click()
    expect(page.locator("body[data-live=on]")).to_be_attached()
    expect(page.get_by_test_id("total-requests")).to_have_text("2")  # playground + SDK
    reply = client.chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "Hello there"}]
    )
    assert reply.choices[0].message.content
    live_row = page.locator("table[data-live-log] tbody tr").first
    expect(live_row).to_contain_text("demo-chat")
    expect(live_row).to_contain_text("demo")
    expect(page.get_by_test_id("total-requests")).to_have_text("3")
    page.reload()
    expect(page.get_by_test_id("total-requests")).to_have_text("3")
    page.screenshot(path=shots / "usage.png", full_page=True)

    page.get_by_role("link", name="Wallet").click()
    expect(page.get_by_text("Top-up of $25 (Stripe Checkout)")).to_be_visible()
    page.screenshot(path=shots / "wallet.png", full_page=True)


def _login(context: BrowserContext, live_url: str, user: User) -> None:
    client = Client()
    client.force_login(user)
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_url}]
    )


def test_a_member_without_billing_rights_cannot_open_the_wallet(
    page: Page, context: BrowserContext, live_url: str
) -> None:
    owner = User.objects.create_user("owner@example.com", "pw-owner-123", email_verified=True)
    member = User.objects.create_user("member@example.com", "pw-member-123", email_verified=True)
    org = Organization.objects.create(name="Team", slug="team")
    membership_set(organization=org, user=owner, role=Role.OWNER)
    membership_set(organization=org, user=member, role=Role.MEMBER)
    _login(context, live_url, member)
    page.goto("/o/team/")
    expect(page.get_by_role("navigation", name="Dashboard")).to_be_visible()
    expect(page.get_by_role("link", name="Wallet")).to_have_count(0)
    response = page.goto("/o/team/wallet/")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    assert Membership.objects.get(user=member).role == Role.MEMBER


def test_one_organization_never_sees_anothers_data(
    page: Page, context: BrowserContext, live_url: str
) -> None:
    alice = User.objects.create_user("alice@example.com", "pw-alice-123", email_verified=True)
    mine = Organization.objects.create(name="Mine", slug="mine")
    theirs = Organization.objects.create(name="Theirs", slug="theirs")
    membership_set(organization=mine, user=alice, role=Role.OWNER)
    secret_key, _ = api_key_create(
        project=project_create(organization=theirs, name="secret-project"), name="their-key"
    )
    request_log_row(organization_id=theirs.pk, model="their-secret-model")
    request_log_row(organization_id=mine.pk, model="my-model")
    _login(context, live_url, alice)
    for path in ("/o/mine/usage/", "/o/mine/usage/requests/", "/o/mine/keys/", "/o/mine/projects/"):
        page.goto(path)
        body = page.locator("body").inner_text()
        for leaked in ("their-secret-model", "secret-project", "their-key", "Theirs"):
            assert leaked not in body, (path, leaked)
    response = page.goto("/o/theirs/usage/")
    assert response is not None and response.status == 404
    page.goto("/o/mine/usage/requests/")
    expect(page.get_by_text("my-model")).to_be_visible()
    assert secret_key.revoked_at is None


def _checkout_topup(org: Organization, *, usd: int, n: int) -> None:
    """The demo's ``n``-th Checkout top-up, of ``usd`` dollars, in ``org``'s ledger."""
    from billing.models import EntryKind
    from billing.services import wallet_credit

    wallet_credit(
        organization=org,
        amount_nanos=usd * 10**9,
        kind=EntryKind.TOPUP,
        idempotency_key=f"demo-topup-{n}",
        description=f"Top-up of ${usd} (Stripe Checkout)",
    )


def _demo_organization() -> tuple[User, Organization]:
    """An organization with a month of calls, money movements, members and an invitation."""
    from datetime import timedelta

    from django.utils import timezone

    from accounts.services import invitation_create
    from billing.models import EntryKind
    from billing.services import wallet_credit
    from inference.models import RequestLog

    owner = User.objects.create_user("ops@acme.example", "pw-demo-123", email_verified=True)
    org = Organization.objects.create(name="Acme AI", slug="acme-ai")
    membership_set(organization=org, user=owner, role=Role.OWNER)
    for email, role in (("dev@acme.example", Role.MEMBER), ("finance@acme.example", Role.BILLING)):
        user = User.objects.create_user(email, "pw-demo-123", email_verified=True)
        membership_set(organization=org, user=user, role=role)
    invitation_create(organization=org, email="new@acme.example", role=Role.ADMIN, invited_by=owner)
    backend = project_create(organization=org, name="Backend", monthly_budget_nanos=200 * 10**9)
    research = project_create(organization=org, name="Research")
    keys = [
        api_key_create(project=backend, name="production")[0],
        api_key_create(project=backend, name="staging")[0],
        api_key_create(project=research, name="notebooks")[0],
    ]
    models = [
        ("gpt-4o-mini", "openai", 150),
        ("deepseek-chat", "deepseek", 270),
        ("gemma-4-31B-it", "infrai-gpu", 90),
    ]
    now = timezone.now()
    rows = []
    for day in range(30):
        for i in range(3 + (day * 7) % 11):
            model, vendor, price = models[(day + i) % 3]
            key = keys[(day + i) % 3]
            rows.append(
                request_log_row(
                    organization_id=org.pk,
                    save=False,
                    project_id=key.project_id,
                    api_key_id=key.pk,
                    created_at=now - timedelta(days=day, minutes=17 * i),
                    model=model,
                    vendor=vendor,
                    input_tokens=400 + 37 * i,
                    output_tokens=120 + 11 * day,
                    cost_nanos=price * (520 + 37 * i + 11 * day) * 1000,
                    latency_ms=300 + 41 * i,
                    failovers=1 if i == 4 else 0,
                    routing={
                        "mode": "auto",
                        "why": "balanced: best quality per price",
                        "candidates": [vendor, "backup"],
                    },
                )
            )
    RequestLog.objects.bulk_create(rows)
    _checkout_topup(org, usd=50, n=1)
    wallet_credit(
        organization=org,
        amount_nanos=-sum(r.cost_nanos for r in rows),
        kind=EntryKind.USAGE,
        idempotency_key="demo-usage",
        description="API usage",
    )
    _checkout_topup(org, usd=25, n=2)
    return owner, org


def test_main_pages_render_in_the_browser_without_errors(
    page: Page, context: BrowserContext, live_url: str, demo_catalog: None, shots: Path
) -> None:
    owner, org = _demo_organization()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _login(context, live_url, owner)
    tour = [
        ("", "Acme AI", "overview.png"),
        ("start/", "Getting started", "getting-started.png"),
        ("projects/", "Projects", "projects.png"),
        ("keys/", "API keys", "keys.png"),
        ("usage/", "Usage", "usage-month.png"),
        ("usage/requests/", "Request log", "request-log.png"),
        ("wallet/", "Wallet", "wallet-history.png"),
        ("members/", "Members", "members.png"),
        ("playground/", "Playground", None),
    ]
    for path, heading, shot in tour:
        page.goto(f"/o/{org.slug}/{path}")
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        if shot:
            page.screenshot(path=shots / shot, full_page=True)
    expect(page.locator("body[data-live=on]")).to_be_attached()

    page.goto(f"/o/{org.slug}/usage/requests/")
    page.locator("table tbody tr a").first.click()
    expect(page.get_by_text("balanced: best quality per price").first).to_be_visible()
    page.screenshot(path=shots / "request-detail.png", full_page=True)

    assert errors == []


def _funded_organization(slug: str, *, credit_nanos: int = 5 * 10**9) -> tuple[User, Organization]:
    from billing.models import EntryKind
    from billing.services import wallet_credit

    owner = User.objects.create_user(f"{slug}@example.com", "pw-owner-123", email_verified=True)
    org = Organization.objects.create(name=slug.title(), slug=slug)
    membership_set(organization=org, user=owner, role=Role.OWNER)
    wallet_credit(
        organization=org,
        amount_nanos=credit_nanos,
        kind=EntryKind.TOPUP,
        idempotency_key=f"{slug}-credit",
        description="Top-up",
    )
    return owner, org


def test_the_playground_talks_in_turns_and_shows_the_exact_request_as_code(
    page: Page,
    context: BrowserContext,
    live_url: str,
    demo_catalog: None,
    fake_vendor: FakeVendor,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    shots: Path,
) -> None:
    settings.INFRAI_PUBLIC_BASE_URL = f"{live_url}/v1"  # what the snippets call
    owner, org = _funded_organization("play")
    project_create(organization=org, name="Sandbox")
    _login(context, live_url, owner)
    fake_vendor.requests.clear()

    page.goto(f"/o/{org.slug}/playground/")
    page.get_by_role("button", name="Open the playground").click()
    models = page.locator("#pg-model optgroup[label='Chat models'] option").all_inner_texts()
    assert models == ["demo-chat"]
    page.get_by_label("Model or routing mode").select_option("demo-chat")
    page.get_by_label("System prompt").fill("Answer in one line.")
    page.get_by_label("Temperature").fill("0.3")
    page.get_by_label("Max tokens").fill("64")
    page.get_by_label("Message", exact=True).fill("What is a hash map?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#conversation li[data-role=assistant]")).to_have_count(1)
    expect(page.locator("#answer-meta")).to_contain_text("vendor demo")
    first_answer = page.locator("#conversation li[data-role=assistant] .content").inner_text()
    assert first_answer.strip()

    # The second turn carries the first; "View code" shows exactly that request.
    page.get_by_label("Message", exact=True).fill("And a heap?")
    page.get_by_text("View code", exact=True).click()
    python_code = page.get_by_test_id("code-python").inner_text()
    curl_code = page.get_by_test_id("code-curl").inner_text()
    page.screenshot(path=shots / "playground.png", full_page=True)
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#conversation li[data-role=assistant]")).to_have_count(2)
    sent = fake_vendor.requests[-1]
    assert [(m["role"], m["content"]) for m in sent["messages"]] == [
        ("system", "Answer in one line."),
        ("user", "What is a hash map?"),
        ("assistant", first_answer),
        ("user", "And a heap?"),
    ]
    assert sent["temperature"] == 0.3
    assert 64 in (sent.get("max_tokens"), sent.get("max_completion_tokens"))

    # The snippets are runnable and send the same request (with the key from the environment).
    key = page.locator("#chat-form").get_attribute("data-key")
    assert key and key not in python_code and key not in curl_code
    monkeypatch.setenv("INFRAI_API_KEY", key)
    fake_vendor.requests.clear()
    exec(compile(python_code, "view-code.py", "exec"), {})
    by_python = fake_vendor.requests[-1]
    assert by_python["messages"] == sent["messages"]
    assert by_python["temperature"] == 0.3
    if shutil.which("curl"):
        done = subprocess.run(
            ["bash", "-c", curl_code], capture_output=True, text=True, timeout=60, check=True
        )
        assert json.loads(done.stdout)["choices"][0]["message"]["content"]
        assert fake_vendor.requests[-1]["messages"] == sent["messages"]

    # "New conversation" starts over; reloading reuses the one key of this user and project.
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator("#conversation li")).to_have_count(0)
    shown = page.get_by_test_id("playground-key").inner_text()
    page.reload()
    expect(page.get_by_test_id("playground-key")).to_have_text(shown)
    assert page.locator("#chat-form").get_attribute("data-key") == key
    assert ApiKey.objects.filter(organization=org).count() == 1


def _region_texts(page: Page, names: tuple[str, ...]) -> dict[str, str]:
    return {name: page.locator(f"[data-live-region={name}]").inner_text() for name in names}


def _refreshed_after(page: Page, count: int) -> None:
    """Wait until the page re-rendered its live regions more than ``count`` times."""
    page.wait_for_function(
        f"parseInt(document.body.getAttribute('data-live-refreshes') || '0', 10) > {count}"
    )


def _refreshes(page: Page) -> int:
    return int(page.evaluate("document.body.getAttribute('data-live-refreshes') || '0'"))


def _open_live(page: Page, path: str) -> None:
    """Open ``path`` and wait until its socket is on and the consumer's one ``resync`` (sent
    ``infra.live.WATCH_MEMO_S`` after connecting) has re-rendered the page: from then on
    every re-render is caused by an event of the test."""
    page.goto(path)
    expect(page.locator("body[data-live=on]")).to_be_attached()
    _refreshed_after(page, 0)


def test_live_pages_show_what_a_reload_shows(
    page: Page, context: BrowserContext, live_url: str, demo_catalog: None, shots: Path
) -> None:
    owner, org = _funded_organization("live")
    project = project_create(organization=org, name="Backend")
    _, raw = api_key_create(project=project, name="server")
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key=raw, max_retries=0)
    _login(context, live_url, owner)

    # Usage: the cost card keeps sub-cent digits; cards, breakdowns and latest calls follow.
    _open_live(page, f"/o/{org.slug}/usage/")
    expect(page.get_by_test_id("total-cost")).to_have_text("$0.00")
    before = _refreshes(page)
    client.chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "Count to three"}]
    )
    expect(page.get_by_test_id("total-requests")).to_have_text("1")
    _refreshed_after(page, before)
    cost = page.get_by_test_id("total-cost").inner_text()
    assert re.fullmatch(r"\$0\.0000\d+", cost), cost  # a few millionths of a dollar, exactly
    expect(page.get_by_test_id("breakdown-model")).to_contain_text("demo-chat")
    expect(page.get_by_test_id("breakdown-key")).to_contain_text("server")
    live = _region_texts(page, ("usage",))
    page.reload()
    assert _region_texts(page, ("usage",)) == live

    # The request log: a failed call appears live, with its status, as after a reload.
    _open_live(page, f"/o/{org.slug}/usage/requests/")
    before = _refreshes(page)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
    _refreshed_after(page, before)
    expect(page.get_by_test_id("log-table")).to_contain_text("model_not_found")
    live = _region_texts(page, ("log",))
    page.reload()
    assert _region_texts(page, ("log",)) == live

    # The wallet: balance, held and the ledger move with a call, as a reload shows them.
    _open_live(page, f"/o/{org.slug}/wallet/")
    balance = page.get_by_test_id("balance").inner_text()
    before = _refreshes(page)
    client.chat.completions.create(
        model="demo-chat", messages=[{"role": "user", "content": "One more"}]
    )
    expect(page.get_by_test_id("balance")).not_to_have_text(balance)
    _refreshed_after(page, before)
    names = ("wallet-cards", "holds", "ledger")
    live = _region_texts(page, names)
    page.reload()
    assert _region_texts(page, names) == live
    page.screenshot(path=shots / "wallet-live.png", full_page=True)


OVERFLOW = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.mark.parametrize(
    ("width", "height", "label"), [(390, 844, "phone"), (1280, 800, "desktop")]
)
def test_main_pages_fit_the_window_on_a_phone_and_a_desktop(
    browser: Any, live_url: str, width: int, height: int, label: str, shots: Path
) -> None:
    owner, org = _demo_organization()
    long_route = {
        "mode": "auto",
        "why": "balanced: best quality per price",
        "candidates": [f"vendor-with-a-rather-long-name-{n}/model-{'x' * 40}" for n in range(6)],
        "note": "y" * 400,
    }
    detail = request_log_row(organization_id=org.pk, routing=long_route)
    ctx = browser.new_context(viewport={"width": width, "height": height}, base_url=live_url)
    page = ctx.new_page()
    try:
        for path in ("/", "/login/", "/signup/", "/no-such-page/"):
            page.goto(path)
            assert page.evaluate(OVERFLOW), (label, path)
        _login(ctx, live_url, owner)
        paths = [
            "",
            "start/",
            "projects/",
            "keys/",
            "usage/",
            "usage/requests/",
            f"usage/requests/{detail.request_id}/",
            "wallet/",
            "wallet/card/",
            "members/",
            "playground/",
        ]
        for path in paths:
            page.goto(f"/o/{org.slug}/{path}")
            expect(page.locator("h1")).to_be_visible()
            sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert sizes[0] <= sizes[1], (label, path, sizes)
        # The routing <pre> stays inside the page (it once pushed it to 1,310 px).
        routing = page.goto(f"/o/{org.slug}/usage/requests/{detail.request_id}/")
        assert routing is not None and routing.status == 200
        pre_right = page.get_by_test_id("routing").evaluate("e => e.getBoundingClientRect().right")
        assert pre_right <= width
        page.goto(f"/o/{org.slug}/usage/")
        nav = page.locator("nav.side").bounding_box()
        main = page.locator("main").bounding_box()
        assert nav is not None and main is not None
        if label == "phone":  # the sidebar becomes a row above the page
            assert nav["y"] + nav["height"] <= main["y"] + 1 and main["width"] >= width - 2
        else:  # the sidebar stays beside the page
            assert nav["x"] + nav["width"] <= main["x"] + 1
        page.screenshot(path=shots / f"usage-{label}.png", full_page=True)
    finally:
        ctx.close()


def test_the_wallet_shows_a_running_call_s_hold_while_it_runs(
    page: Page, context: BrowserContext, live_url: str, demo_catalog: None, fake_vendor: FakeVendor
) -> None:
    import threading

    owner, org = _funded_organization("held")
    _, raw = api_key_create(project=project_create(organization=org, name="Slow"), name="k")
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key=raw, max_retries=0)
    _login(context, live_url, owner)
    _open_live(page, f"/o/{org.slug}/wallet/")
    expect(page.get_by_test_id("held")).to_have_text("$0.00")
    fake_vendor.stall_s = 8
    outcome: list[object] = []

    def slow_call() -> None:
        try:
            outcome.append(
                client.chat.completions.create(
                    model="demo-chat", messages=[{"role": "user", "content": "slowly"}]
                )
            )
        except openai.APIError as exc:  # reported below, not printed by the thread
            outcome.append(exc)

    call = threading.Thread(target=slow_call)
    call.start()
    try:
        expect(page.get_by_test_id("held")).not_to_have_text("$0.00", timeout=5000)
    finally:
        call.join()
        fake_vendor.stall_s = 0
