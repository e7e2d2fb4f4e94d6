"""Staff pages: the matrix editor changes routing and is recorded; vendors show health."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from accounts.models import User
from catalog import health
from catalog.models import Model, ParameterRule
from catalog.routing import RoutingRequest
from catalog.selectors import routing_decide

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(seeded: None) -> tuple[Client, User]:
    user = User.objects.create_superuser(email="ops@infrai.test", password="x-long-password")
    client = Client()
    client.force_login(user)
    return client, user


def _form_from(page) -> dict[str, str]:
    data: dict[str, str] = {}
    for row in page.context["rows"]:
        for cell in row["cells"]:
            data[cell["name"]] = cell["support"]
            data[cell["accepted_name"]] = cell["accepted"]
    return data


def _logit_bias_models(make_routable) -> set[str]:
    make_routable("infrai-gpu")
    decision = asyncio.run(
        routing_decide(request=RoutingRequest(model="auto", params={"logit_bias": {"1": 2}}))
    )
    return {c.model for c in decision.candidates}


@pytest.mark.django_db(transaction=True)  # the async snapshot reads on another connection
def test_matrix_editor_change_alters_routing_and_is_logged(
    staff, make_routable, django_capture_on_commit_callbacks
):
    client, user = staff
    url = reverse("admin:catalog_model_matrix")
    page = client.get(url)
    assert page.status_code == 200
    gemma = Model.objects.get(model_id="gemma-4-31B-it")
    field = f"cell-{gemma.pk}-logit_bias"
    assert f'name="{field}"' in page.content.decode()
    assert "gemma-4-31B-it" not in _logit_bias_models(make_routable)

    form = _form_from(page)
    assert form[field] == "fails"
    form[field] = "honoured"
    with django_capture_on_commit_callbacks(execute=True):
        saved = client.post(url, form)
    assert saved.status_code == 302

    rule = ParameterRule.objects.get(model=gemma, parameter="logit_bias")
    assert rule.support == "honoured"
    assert "gemma-4-31B-it" in _logit_bias_models(make_routable)
    entry = LogEntry.objects.get(object_id=str(gemma.pk))
    assert entry.user_id == user.pk
    assert entry.action_flag == CHANGE
    assert "logit_bias: fails → honoured" in entry.get_change_message()
    # Only the changed model got a history entry.
    assert LogEntry.objects.count() == 1


def test_matrix_editor_saves_accepted_values(staff, django_capture_on_commit_callbacks):
    client, _ = staff
    url = reverse("admin:catalog_model_matrix")
    form = _form_from(client.get(url))
    smol = Model.objects.get(model_id="SmolLM2-135M-Instruct")
    form[f"cell-{smol.pk}-top_k"] = "fails"
    form[f"accepted-{smol.pk}-top_k"] = "[0]"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url, form)
    rule = ParameterRule.objects.get(model=smol, parameter="top_k")
    assert (rule.support, rule.accepted_values) == ("fails", [0])


def test_matrix_editor_refuses_bad_accepted_values(staff):
    client, _ = staff
    url = reverse("admin:catalog_model_matrix")
    form = _form_from(client.get(url))
    smol = Model.objects.get(model_id="SmolLM2-135M-Instruct")
    form[f"cell-{smol.pk}-seed"] = "fails"
    form[f"accepted-{smol.pk}-seed"] = "not json"
    page = client.post(url, form)
    assert page.status_code == 200
    assert not ParameterRule.objects.filter(model=smol, parameter="seed").exists()
    assert LogEntry.objects.count() == 0


def test_matrix_editor_needs_staff(seeded):
    user = User.objects.create_user(email="someone@infrai.test", password="x-long-password")
    client = Client()
    client.force_login(user)
    page = client.get(reverse("admin:catalog_model_matrix"))
    assert page.status_code == 302  # to the admin login


def test_vendor_pages_show_credentials_health_and_routable_offerings(staff):
    client, _ = staff
    for _ in range(5):
        health.record_failure("deepseek")
    listing = client.get(reverse("admin:catalog_vendor_changelist")).content.decode()
    assert "OPENAI_API_KEY: NOT configured" in listing
    assert "open," in listing
    from catalog.models import Vendor

    gpu = Vendor.objects.get(name="infrai-gpu")
    page = client.get(reverse("admin:catalog_vendor_change", args=[gpu.pk])).content.decode()
    assert "SmolLM2-135M-Instruct: not routable" in page
    assert "not verified" in page


def test_price_rows_are_history_not_edits(staff):
    client, _ = staff
    from catalog.models import Price

    price = Price.objects.first()
    assert price is not None
    url = reverse("admin:catalog_price_change", args=[price.pk])
    response = client.post(url, {"source": "overwritten", "input_per_mtok_nanos": "1"})
    price.refresh_from_db()
    assert price.source != "overwritten"
    assert response.status_code in (200, 403)


# --- safety: values checked on save, prices in USD, one snapshot per page ---------------------


def _model_form(model: Model, **changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "model_id": model.model_id,
        "display_name": model.display_name,
        "owned_by": model.owned_by,
        "description": model.description,
        "capabilities": list(model.capabilities),
        "tasks": list(model.tasks),
        "context_window": model.context_window,
        "max_output_tokens": model.max_output_tokens,
        "default_output_tokens": model.default_output_tokens,
        "embedding_dimensions": model.embedding_dimensions or "",
        "quality_tier": model.quality_tier,
        "tokenizer": model.tokenizer,
        "created_at_0": model.created_at.strftime("%Y-%m-%d"),
        "created_at_1": model.created_at.strftime("%H:%M:%S"),
    }
    for prefix in ("parameter_rules", "offerings"):
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": "0",
                f"{prefix}-INITIAL_FORMS": "0",
                f"{prefix}-MIN_NUM_FORMS": "0",
                f"{prefix}-MAX_NUM_FORMS": "1000",
            }
        )
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("field", "value"),
    [("capabilities", ["chat", "5"]), ("capabilities", ["telepathy"]), ("tasks", ["juggling"])],
)
def test_an_unknown_capability_or_task_is_refused_on_save(staff, field, value):
    client, _ = staff
    model = Model.objects.get(model_id="gpt-4o")
    before = (list(model.capabilities), list(model.tasks))
    url = reverse("admin:catalog_model_change", args=[model.pk])
    page = client.post(url, _model_form(model, **{field: value}))
    assert page.status_code == 200  # the form again, with the error
    assert page.context["adminform"].form.errors[field]
    model.refresh_from_db()
    assert (model.capabilities, model.tasks) == before


def test_known_capabilities_and_tasks_save(staff):
    client, _ = staff
    model = Model.objects.get(model_id="gpt-4o")
    url = reverse("admin:catalog_model_change", args=[model.pk])
    page = client.post(url, _model_form(model, capabilities=["chat", "tools"], tasks=["coding"]))
    assert page.status_code == 302, page.context["adminform"].form.errors
    model.refresh_from_db()
    assert (model.capabilities, model.tasks) == (["chat", "tools"], ["coding"])


@pytest.mark.parametrize(
    ("support", "accepted"), [("sometimes", "[]"), ("fails", '{"a": 1}'), ("fails", '"1.0"')]
)
def test_a_bad_matrix_cell_is_refused_in_the_model_form(staff, support, accepted):
    client, _ = staff
    model = Model.objects.get(model_id="gpt-4o")
    url = reverse("admin:catalog_model_change", args=[model.pk])
    data = _model_form(model)
    data.update(
        {
            "parameter_rules-TOTAL_FORMS": "1",
            "parameter_rules-0-parameter": "seed",
            "parameter_rules-0-support": support,
            "parameter_rules-0-accepted_values": accepted,
            "parameter_rules-0-max_value": "",
            "parameter_rules-0-note": "",
        }
    )
    page = client.post(url, data)
    assert page.status_code == 200
    assert not ParameterRule.objects.filter(model=model, parameter="seed").exists()


def _add_price(client: Client, **fields: str) -> HttpResponse:
    """The admin's "add price" form posted for openai's gpt-4o from 2031 with these fields."""
    from catalog.models import Offering

    offering = Offering.objects.get(vendor__name="openai", model__model_id="gpt-4o")
    form = {
        "offering": offering.pk,
        "effective_from_0": "2031-01-01",
        "effective_from_1": "00:00:00",
        "per_mchar_usd": "0",
        "per_audio_second_usd": "0",
        **fields,
    }
    return client.post(reverse("admin:catalog_price_add"), form)


def test_a_price_is_typed_in_usd_and_stored_in_nanos(staff):
    from catalog.models import Price

    client, _ = staff
    page = _add_price(
        client,
        input_per_mtok_usd="2.5",
        cached_input_per_mtok_usd="1.25",
        output_per_mtok_usd="0.000000001",
        per_image_usd='{"1024x1024/standard": "0.04"}',
        source="admin test",
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    price = Price.objects.get(source="admin test")
    assert price.input_per_mtok_nanos == 2_500_000_000
    assert price.cached_input_per_mtok_nanos == 1_250_000_000
    assert price.output_per_mtok_nanos == 1
    assert price.per_image_nanos == {"1024x1024/standard": 40_000_000}
    listing = client.get(reverse("admin:catalog_price_changelist")).content.decode()
    assert "2.5" in listing and "2500000000" not in listing


def test_cache_write_and_reasoning_prices_may_be_left_empty_for_the_defaults(staff):
    from catalog.models import Price
    from catalog.selectors import price_snapshot

    client, _ = staff
    common = {"input_per_mtok_usd": "2", "cached_input_per_mtok_usd": "1"}
    page = _add_price(client, **common, output_per_mtok_usd="8", source="defaults")
    assert page.status_code == 302, page.context["adminform"].form.errors
    page = _add_price(
        client,
        **common,
        output_per_mtok_usd="8",
        cache_write_5m_per_mtok_usd="0",
        cache_write_1h_per_mtok_usd="3",
        reasoning_per_mtok_usd="10",
        source="explicit",
        effective_from_0="2031-02-01",
    )
    assert page.status_code == 302, page.context["adminform"].form.errors
    left_empty = Price.objects.get(source="defaults")
    assert left_empty.cache_write_5m_per_mtok_nanos is None
    assert left_empty.reasoning_per_mtok_nanos is None
    snapshot = price_snapshot(left_empty)  # 1.25× and 2× the input, the output price
    assert (
        snapshot.cache_write_5m_per_mtok_nanos,
        snapshot.cache_write_1h_per_mtok_nanos,
        snapshot.reasoning_per_mtok_nanos,
    ) == (2_500_000_000, 4_000_000_000, 8_000_000_000)
    explicit = Price.objects.get(source="explicit")
    assert (
        explicit.cache_write_5m_per_mtok_nanos,
        explicit.cache_write_1h_per_mtok_nanos,
        explicit.reasoning_per_mtok_nanos,
    ) == (0, 3_000_000_000, 10_000_000_000)


def test_a_price_with_more_than_nine_decimals_is_refused(staff):
    from catalog.models import Price

    client, _ = staff
    page = _add_price(
        client,
        input_per_mtok_usd="0.0000000001",
        cached_input_per_mtok_usd="0",
        output_per_mtok_usd="-1",
        per_image_usd="",
        source="too precise",
    )
    assert page.status_code == 200
    errors = page.context["adminform"].form.errors
    assert "input_per_mtok_usd" in errors and "output_per_mtok_usd" in errors
    assert not Price.objects.filter(source="too precise").exists()


def test_an_invalid_row_is_a_warning_on_the_catalog_pages(staff):
    client, _ = staff
    Model.objects.filter(model_id="gpt-4o").update(capabilities=["chat", 5])
    page = client.get(reverse("admin:catalog_offering_changelist")).content.decode()
    assert "Invalid catalog row: model gpt-4o left out of routing" in page


def _offering_changelist_queries(client: Client) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("admin:catalog_offering_changelist"))
    assert page.status_code == 200
    return len(queries)


def _more_offerings(count: int) -> None:
    from catalog.models import Offering, Vendor

    vendor = Vendor.objects.get(name="openai")
    for i in range(count):
        model = Model.objects.create(model_id=f"extra-{i}", owned_by="tests", capabilities=["chat"])
        Offering.objects.create(model=model, vendor=vendor, upstream_model=f"extra-{i}")


def test_offering_list_queries_do_not_grow_with_its_rows(staff):
    client, _ = staff
    _offering_changelist_queries(client)  # warm: session, content types
    few = _offering_changelist_queries(client)
    _more_offerings(15)
    assert _offering_changelist_queries(client) == few


def test_vendor_list_queries_do_not_grow_with_its_rows(staff):
    from catalog.models import Vendor

    client, _ = staff
    url = reverse("admin:catalog_vendor_changelist")
    client.get(url)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as before:
        client.get(url)
    for i in range(6):
        Vendor.objects.create(
            name=f"extra-{i}", adapter_kind="openai", base_url="http://127.0.0.1:9/v1"
        )
    with CaptureQueriesContext(connection) as after:
        client.get(url)
    assert len(after) == len(before)


def test_an_organization_page_links_to_its_wallet_ledger_keys_and_members(staff):
    from accounts.services import organization_create
    from billing.models import Wallet

    client, user = staff
    org = organization_create(name="Linked Co", owner=user)
    wallet = Wallet.objects.get(organization=org)
    page = client.get(reverse("admin:accounts_organization_change", args=[org.pk]))
    html = page.content.decode()
    assert reverse("admin:billing_wallet_change", args=[wallet.pk]) in html
    ledger = f"{reverse('admin:billing_ledgerentry_changelist')}?wallet__id__exact={wallet.pk}"
    assert ledger in html
    keys = f"{reverse('admin:accounts_apikey_changelist')}?organization__id__exact={org.pk}"
    assert keys in html
    assert 'href="#memberships-group"' in html
    for url in (ledger, keys):  # the filters are ones the admin accepts
        assert client.get(url).status_code == 200


def test_an_offering_page_shows_its_price_history_in_usd(staff):
    from catalog.models import Offering

    client, _ = staff
    offering = Offering.objects.filter(prices__isnull=False).first()
    assert offering is not None
    price = offering.prices.order_by("-effective_from").first()
    page = client.get(reverse("admin:catalog_offering_change", args=[offering.pk]))
    assert page.status_code == 200
    from money.usd import nanos_to_usd_str

    assert nanos_to_usd_str(price.input_per_mtok_nanos) in page.content.decode()
    assert f">{price.input_per_mtok_nanos}<" not in page.content.decode()


def test_a_price_added_inline_on_the_offering_page_is_typed_in_usd(staff):
    from catalog.models import Offering, Price

    client, _ = staff
    offering = Offering.objects.get(vendor__name="openai", model__model_id="gpt-4o")
    url = reverse("admin:catalog_offering_change", args=[offering.pk])
    existing = offering.prices.count()
    data = {
        "model": offering.model_id,
        "vendor": offering.vendor_id,
        "upstream_model": offering.upstream_model,
        "priority": offering.priority,
        "enabled": "on",
        "batch_discount_percent": offering.batch_discount_percent,
        "prices-TOTAL_FORMS": str(existing + 1),
        "prices-INITIAL_FORMS": str(existing),
        "prices-MIN_NUM_FORMS": "0",
        "prices-MAX_NUM_FORMS": "1000",
    }
    for i, price in enumerate(offering.prices.order_by("-effective_from")):
        data[f"prices-{i}-id"] = price.pk
        data[f"prices-{i}-offering"] = offering.pk
    new = existing
    data.update(
        {
            f"prices-{new}-offering": offering.pk,
            f"prices-{new}-effective_from_0": "2032-01-01",
            f"prices-{new}-effective_from_1": "00:00:00",
            f"prices-{new}-input_per_mtok_usd": "3",
            f"prices-{new}-cached_input_per_mtok_usd": "1.5",
            f"prices-{new}-output_per_mtok_usd": "12.000000001",
            f"prices-{new}-per_mchar_usd": "0",
            f"prices-{new}-per_audio_second_usd": "0",
            f"prices-{new}-per_image_usd": "",
            f"prices-{new}-source": "inline test",
        }
    )
    page = client.post(url, data)
    assert page.status_code == 302, page.content.decode()[:2000]
    price = Price.objects.get(source="inline test")
    assert (price.input_per_mtok_nanos, price.output_per_mtok_nanos) == (
        3_000_000_000,
        12_000_000_001,
    )
