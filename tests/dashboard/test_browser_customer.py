"""The customer dashboard in a real browser, for what only a browser shows: the playground keeps
what is typed while an answer streams, the request log fits a phone once a playground key
exists, the API reference renders the served OpenAPI document's operations, and the theme
follows the system's light / dark setting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from accounts.services import project_create
from tests.dashboard.test_browser import (  # noqa: F401  (fixtures used by name)
    _funded_organization,
    _login,
    _orm_beside_playwright,
    demo_catalog,
    fake_vendor,
    shots,
)
from tests.fakes.vendors import FakeVendor

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("demo_catalog")]

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


def _context(browser: Any, live_url: str, width: str, **options: Any) -> BrowserContext:
    w, h = WIDTHS[width]
    return browser.new_context(viewport={"width": w, "height": h}, base_url=live_url, **options)


@pytest.fixture(params=list(WIDTHS))
def sized(request: pytest.FixtureRequest, browser: Any, live_url: str) -> Iterator[BrowserContext]:
    ctx = _context(browser, live_url, request.param)
    yield ctx
    ctx.close()


def _open_playground(page: Page, slug: str) -> None:
    page.goto(f"/o/{slug}/playground/")
    page.get_by_role("button", name="Open the playground").click()
    expect(page.locator("#chat-form")).to_be_visible()


def test_the_playground_keeps_what_is_typed_while_an_answer_streams(
    sized: BrowserContext,
    live_url: str,
    fake_vendor: FakeVendor,  # noqa: F811  (the fixture imported above)
) -> None:
    owner, org = _funded_organization("typing")
    project_create(organization=org, name="Sandbox")
    _login(sized, live_url, owner)
    page = sized.new_page()
    _open_playground(page, org.slug)
    page.get_by_label("Model or routing mode").select_option("demo-chat")
    prompt = page.get_by_label("Message", exact=True)
    prompt.fill("What is a hash map?")
    fake_vendor.chunk_delay_s = 0.4  # the answer takes a few seconds to stream
    try:
        page.get_by_role("button", name="Send").click()
        expect(prompt).to_have_value("")  # the sent message leaves the box at once
        expect(page.locator("#conversation li[data-role=assistant]")).to_have_count(1)
        prompt.fill("And a heap?")
        assert page.locator("#send").is_disabled()  # typed while the answer still streams
        expect(page.locator("#send")).to_be_enabled(timeout=20_000)
    finally:
        fake_vendor.chunk_delay_s = 0.0
    expect(page.locator("#answer-meta")).to_contain_text("vendor demo")
    expect(prompt).to_have_value("And a heap?")
    page.get_by_text("View code", exact=True).click()
    code = page.get_by_test_id("code-python").inner_text()
    assert '"And a heap?"' in code and '"What is a hash map?"' in code
    assert '"content": ""' not in code  # no empty user turn


def test_the_request_log_fits_a_phone_with_a_playground_key(
    browser: Any,
    live_url: str,
    shots: Path,  # noqa: F811
) -> None:
    owner, org = _funded_organization("a-rather-long-organization-name-for-the-key-filter")
    project_create(organization=org, name="Sandbox")
    ctx = _context(browser, live_url, "phone")
    try:
        _login(ctx, live_url, owner)
        page = ctx.new_page()
        _open_playground(page, org.slug)  # mints "playground (<e-mail>)", a long key name
        page.goto(f"/o/{org.slug}/usage/requests/")
        options = page.locator("#id_key option").all_inner_texts()
        assert any(o.startswith("playground (") for o in options), options
        sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert sizes[0] <= sizes[1], sizes
        box = page.locator("#id_key").bounding_box()
        assert box is not None and box["x"] + box["width"] <= 390
        page.screenshot(path=shots / "request-log-phone.png", full_page=True)
    finally:
        ctx.close()


def test_the_api_reference_renders_every_operation_of_the_served_document(
    sized: BrowserContext,
    live_url: str,
    shots: Path,  # noqa: F811
) -> None:
    document = httpx.get(f"{live_url}/v1/openapi.json").json()
    operations = [
        op
        for item in document["paths"].values()
        for name, op in item.items()
        if name in {"get", "post", "put", "patch", "delete"}
    ]
    owner, org = _funded_organization("reference")
    _login(sized, live_url, owner)
    page = sized.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    answered: list[str] = []  # every response the page got, from wherever
    page.on("response", lambda response: answered.append(response.url))
    blocked: list[tuple[str, str | None]] = []
    page.on("requestfailed", lambda request: blocked.append((request.url, request.failure)))
    page.goto(f"/o/{org.slug}/")
    page.get_by_role("link", name="API reference").click()
    expect(page.get_by_role("heading", name="API reference", exact=True)).to_be_visible()
    reference = page.locator("#api-reference[data-rendered=yes]")
    expect(reference).to_be_attached(timeout=20_000)
    chat = next(op for op in operations if op.get("operationId") == "createChatCompletion")
    expect(reference.get_by_role("heading", name=chat["summary"]).first).to_be_attached()
    rendered = reference.locator("[data-section-id^='operation/']").count()
    assert rendered == len(operations), (rendered, len(operations))
    assert errors == []
    # No CDN: Redoc comes from our static files, and the one thing its bundle would fetch from
    # elsewhere (its vendor's logo) is refused by the page's Content-Security-Policy.
    assert [u for u in answered if not u.startswith((live_url, "data:", "blob:"))] == []
    assert all(reason == "csp" for url, reason in blocked if not url.startswith(live_url)), blocked
    sizes = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert sizes[0] <= sizes[1], sizes
    phone = sizes[1] < 760
    page.screenshot(path=shots / ("api-reference-phone.png" if phone else "api-reference.png"))


@pytest.mark.parametrize(
    ("scheme", "background", "text"),
    [
        ("light", "rgb(255, 255, 255)", "rgb(17, 24, 39)"),
        ("dark", "rgb(11, 17, 32)", "rgb(229, 231, 235)"),
    ],
)
def test_the_theme_follows_the_system_setting(
    browser: Any,
    live_url: str,
    scheme: str,
    background: str,
    text: str,
    shots: Path,  # noqa: F811
) -> None:
    owner, org = _funded_organization(f"theme-{scheme}")
    ctx = _context(browser, live_url, "desktop", color_scheme=scheme)
    try:
        _login(ctx, live_url, owner)
        page = ctx.new_page()
        page.goto(f"/o/{org.slug}/")
        colors = page.evaluate(
            "() => { const s = getComputedStyle(document.body);"
            " return [s.backgroundColor, s.color]; }"
        )
        assert colors == [background, text]
        card = page.locator(".card").first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert (card == "rgb(255, 255, 255)") == (scheme == "light")
        if scheme == "dark":
            page.goto(f"/o/{org.slug}/start/")
            page.screenshot(path=shots / "getting-started-dark.png", full_page=True)
    finally:
        ctx.close()
