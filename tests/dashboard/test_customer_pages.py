"""Customer pages as the issue's walk-through found them wanting: the detail of a failed call,
"add credit" after the first call, prices in the unit each model is billed in, amounts and
times as people write them, form help text tied to its field, the flash list, and the API
reference page (Redoc from our own static files)."""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.utils import timezone

from accounts.models import ApiKey, Role
from accounts.services import api_key_create, project_create
from billing.models import EntryKind, LedgerEntry
from billing.services import wallet_credit
from billing.services.starter import starter_credit_grant
from catalog.documents import catalog_load
from catalog.models import Vendor
from inference.models import RequestStatus
from tests.catalog_docs import catalog_model, catalog_vendor, offering
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("status", "http_status", "error_code"),
    [
        (RequestStatus.CLIENT_ERROR, 401, "invalid_api_key"),
        (RequestStatus.CLIENT_ERROR, 402, "insufficient_balance"),
        (RequestStatus.UNAVAILABLE, 503, "no_routable_offering"),
    ],
)
def test_the_detail_of_a_failed_call_without_routing_shows_its_error(
    member_client, status: str, http_status: int, error_code: str
) -> None:
    client, _, org = member_client(Role.MEMBER)
    row = request_log_row(
        organization_id=org.pk,
        status=status,
        http_status=http_status,
        error_code=error_code,
        routing={},  # refused before routing: nothing was decided
        model="",
        vendor="",
        input_tokens=0,
        output_tokens=0,
        cost_nanos=0,
    )
    response = client.get(f"/o/{org.slug}/usage/requests/{row.request_id}/")
    assert response.status_code == 200
    text = response.content.decode()
    assert f"(HTTP {http_status})" in text and f"<code>{error_code}</code>" in text
    assert "<dt>Routing reason</dt><dd>—</dd>" in text
    assert 'data-testid="routing"' not in text  # no empty decision block


def _org_with_a_key(member_client):
    client, _, org = member_client(Role.OWNER)
    api_key_create(project=project_create(organization=org, name="P"), name="k")
    return client, org


def test_overview_keeps_asking_for_credit_after_a_refused_first_call(member_client) -> None:
    client, org = _org_with_a_key(member_client)
    request_log_row(
        organization_id=org.pk,
        status=RequestStatus.CLIENT_ERROR,
        http_status=402,
        error_code="insufficient_balance",
        cost_nanos=0,
    )
    page = client.get(f"/o/{org.slug}/").content.decode()
    assert 'data-testid="next-credit"' in page
    assert f'href="/o/{org.slug}/wallet/">Add credit</a>' in page
    assert "refused with 402" in page
    wallet_credit(organization=org, amount_nanos=10**9, kind=EntryKind.TOPUP, idempotency_key="t1")
    page = client.get(f"/o/{org.slug}/").content.decode()
    assert 'data-testid="next-credit"' not in page
    assert f'href="/o/{org.slug}/usage/">usage</a>' in page


def test_overview_asks_for_credit_after_paid_calls_spent_the_balance(member_client) -> None:
    client, org = _org_with_a_key(member_client)
    request_log_row(organization_id=org.pk)  # an earlier successful call
    page = client.get(f"/o/{org.slug}/").content.decode()
    assert 'data-testid="next-credit"' in page


def _price(**usd: str) -> dict:
    return {"effective_from": "2025-01-01T00:00:00Z", "source": "test price", **usd}


def _billing_units_catalog() -> None:
    Vendor.objects.update(enabled=False)
    ids = ["u-chat", "u-embed", "u-speech", "u-listen", "u-image", "u-moderate"]
    vendor = catalog_vendor("units", base_url="http://127.0.0.1:9", verified_models=ids)

    def model(model_id: str, capability: str, price: dict, context: int = 8000) -> dict:
        return catalog_model(
            model_id,
            capabilities=[capability],
            tasks=[capability],
            context_window=context,
            offerings=[offering("units", model_id, price)],
        )

    catalog_load(
        {
            "vendors": [vendor],
            "models": [
                model(
                    "u-chat",
                    "chat",
                    _price(input_per_mtok_usd="0.15", output_per_mtok_usd="0.60"),
                ),
                model("u-embed", "embeddings", _price(input_per_mtok_usd="0.02")),
                model("u-speech", "speech", _price(per_mchar_usd="1.00"), context=4096),
                model("u-listen", "transcription", _price(per_audio_second_usd="0.00002"), 0),
                model(
                    "u-image",
                    "images",
                    _price(per_image_usd={"1024x1024/standard": "0.04", "1024x1024/hd": "0.12"}),
                ),
                model("u-moderate", "moderation", _price()),
            ],
        }
    )


def _model_row(page: str, model_id: str) -> list[str]:
    row = re.search(rf'<tr data-model="{re.escape(model_id)}">(.*?)</tr>', page, re.S)
    assert row is not None, model_id
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    ]


def test_getting_started_prices_each_model_in_the_unit_it_is_billed_in(member_client) -> None:
    _billing_units_catalog()
    client, _, org = member_client(Role.MEMBER)
    page = client.get(f"/o/{org.slug}/start/").content.decode()
    expected = {  # model → (context, price)
        "u-chat": ("8,000", "$0.15 input, $0.60 output per 1M tokens"),
        "u-embed": ("8,000", "$0.02 per 1M input tokens"),
        "u-speech": ("4,096", "$1.00 per 1M characters"),
        "u-listen": ("—", "$0.00002 per second of audio"),
        "u-image": ("8,000", "$0.04 to $0.12 per image"),
        "u-moderate": ("8,000", "Free"),
    }
    for model_id, (context, price) in expected.items():
        cells = _model_row(page, model_id)
        assert cells[3:] == [context, price], (model_id, cells)
    assert "$0.00 / $0.00" not in page


def test_the_starter_credit_reads_in_dollars_and_cents(member_client) -> None:
    client, user, org = member_client(Role.OWNER)
    entry = starter_credit_grant(organization=org, owner=user)
    assert entry is not None
    assert entry.description == "Starter credit of $0.50 for a new organization"
    assert LedgerEntry.objects.get(pk=entry.pk).kind == EntryKind.STARTER_CREDIT
    wallet = client.get(f"/o/{org.slug}/wallet/").content.decode()
    assert "Starter credit of $0.50" in wallet and "$0.5 " not in wallet


def test_a_key_used_seconds_ago_was_used_just_now(member_client) -> None:
    client, org = _org_with_a_key(member_client)
    ApiKey.objects.filter(organization=org).update(last_used_at=timezone.now())
    page = client.get(f"/o/{org.slug}/keys/").content.decode()
    assert "just now" in page and "0\xa0minutes" not in page
    ApiKey.objects.filter(organization=org).update(
        last_used_at=timezone.now() - timedelta(hours=3, minutes=5)
    )
    page = client.get(f"/o/{org.slug}/keys/").content.decode()
    assert "3\xa0hours, 5\xa0minutes ago" in page  # Django's timesince, non-breaking spaces


class _Ids(HTMLParser):
    """Every element id of a page and every id an ``aria-describedby`` names."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.described_by: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if values.get("aria-describedby"):
            self.described_by[values.get("name") or tag] = (
                values["aria-describedby"] or ""
            ).split()


def _described_by(html: str) -> _Ids:
    parser = _Ids()
    parser.feed(html)
    return parser


def test_form_help_text_and_errors_describe_their_field(client, member_client) -> None:
    signup = _described_by(client.get("/signup/").content.decode())
    assert signup.described_by["password"] == ["id_password_helptext"]
    assert "id_password_helptext" in signup.ids
    refused = client.post("/signup/", {"email": "x@example.com", "password": "123"})
    parsed = _described_by(refused.content.decode())
    assert parsed.described_by["password"] == ["id_password_helptext", "id_password_error"]
    assert {"id_password_helptext", "id_password_error"} <= parsed.ids
    owner, _, org = member_client(Role.OWNER)
    project_create(organization=org, name="P")  # the key form appears once there is a project
    for path in ("projects/", "keys/"):
        page = _described_by(owner.get(f"/o/{org.slug}/{path}").content.decode())
        assert page.described_by, path
        for field, ids in page.described_by.items():
            assert set(ids) <= page.ids, (path, field, ids)


def test_flash_messages_are_a_list_inside_a_status_region(member_client) -> None:
    client, _, org = member_client(Role.OWNER)
    response = client.post(f"/o/{org.slug}/projects/new/", {"name": "Flashy"}, follow=True)
    text = response.content.decode()
    assert re.search(r'<div role="status"[^>]*><ul class="messages"><li class="success">', text)
    assert '<ul class="messages" role="status">' not in text


def test_the_api_reference_is_linked_and_renders_with_our_own_redoc(member_client) -> None:
    client, _, org = member_client(Role.MEMBER)
    reference = f"/o/{org.slug}/api/"
    for path in ("", "start/"):
        assert f'href="{reference}"' in client.get(f"/o/{org.slug}/{path}").content.decode()
    page = client.get(reference)
    assert page.status_code == 200
    text = page.content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', text)
    assert "/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js" in scripts
    assert all(src.startswith("/static/") for src in scripts), scripts  # no CDN
    assert 'data-spec-url="/v1/openapi.json"' in text
    bundle = client.get("/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js")
    assert bundle.status_code == 200
