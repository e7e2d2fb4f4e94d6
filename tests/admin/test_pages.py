"""Staff pages: prices and the ledger in USD, wallets named by their organization, the matrix
keeping every edit of a refused save, the request log, and query counts that do not grow."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.models import Organization, User
from accounts.services import api_key_create, organization_create, project_create
from billing.models import LedgerEntry, Wallet
from billing.services.wallet import wallet_fund
from catalog.models import Model, Offering, ParameterRule, Price, Vendor
from inference.models import RequestLog, RequestStatus
from money.usd import nanos_to_usd_str
from tests.dashboard.factories import request_log_row

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    """The page's text, tags and runs of white space folded to one space."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# --- prices -----------------------------------------------------------------------------------


def test_a_price_view_page_shows_its_amounts_in_usd(staff, small_catalog):
    price = Price.objects.filter(offering__vendor__name="solo").first()
    assert price is not None
    page = staff.get(reverse("admin:catalog_price_change", args=[price.pk]))
    assert page.status_code == 200
    text = _text(page.content.decode()).lower()
    assert "none" not in text
    assert f"input $/1m tok: {nanos_to_usd_str(price.input_per_mtok_nanos)} " in text
    assert f"output $/1m tok: {nanos_to_usd_str(price.output_per_mtok_nanos)} " in text
    assert "cached input $/1m tok: 0.5 " in text  # PRICE of tests.catalog_docs
    assert f"{price.input_per_mtok_nanos}" not in text


# --- the ledger and wallets -------------------------------------------------------------------


@pytest.fixture
def funded(db: None) -> Organization:
    org = organization_create(name="Ledger Lane")
    wallet_fund(organization=org, amount_nanos=2_500_000_000, idempotency_key="t:fund")
    return org


def test_the_ledger_shows_usd_and_names_wallets_by_organization(staff, funded):
    entry = LedgerEntry.objects.get(idempotency_key="t:fund")
    listing = _text(staff.get(reverse("admin:billing_ledgerentry_changelist")).content.decode())
    assert "Ledger Lane (ledger-lane)" in listing
    assert " 2.5 " in listing and "2500000000" not in listing
    assert "wallet of" not in listing
    detail = staff.get(reverse("admin:billing_ledgerentry_change", args=[entry.pk]))
    text = _text(detail.content.decode())
    assert "Amount (USD): 2.5" in text and "Balance after (USD): 2.5" in text
    assert "credit 2.5 USD" in text  # the entry's name (title, breadcrumbs)
    assert "Ledger Lane" in text and "2500000000" not in text and "wallet of" not in text


def test_a_wallet_page_names_its_organization_and_shows_usd(staff, funded):
    wallet = Wallet.objects.get(organization=funded)
    page = staff.get(reverse("admin:billing_wallet_change", args=[wallet.pk]))
    text = _text(page.content.decode())
    assert "wallet of Ledger Lane" in text  # title and breadcrumbs
    assert "Balance (USD): 2.5" in text
    assert not re.search(r"wallet of \d", text) and "2500000000" not in text


def test_ledger_list_queries_do_not_grow_with_its_rows(staff, funded):
    url = reverse("admin:billing_ledgerentry_changelist")
    staff.get(url)
    with CaptureQueriesContext(connection) as few:
        staff.get(url)
    for i in range(8):
        org = organization_create(name=f"Other {i}")
        wallet_fund(organization=org, amount_nanos=1, idempotency_key=f"t:other{i}")
    with CaptureQueriesContext(connection) as many:
        assert "Other 7" in staff.get(url).content.decode()
    assert len(many) == len(few)


# --- the parameter matrix ---------------------------------------------------------------------


def _matrix_form(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    data: dict[str, str] = {}
    for row in page.context["rows"]:
        for cell in row["cells"]:
            data[cell["name"]] = cell["support"]
            data[cell["accepted_name"]] = cell["accepted"]
    return data


def test_a_bad_matrix_cell_keeps_every_other_edit_and_names_its_error(staff, small_catalog):
    url = reverse("admin:catalog_model_matrix")
    model = Model.objects.get(model_id="solo-chat")
    form = _matrix_form(staff.get(url))
    form[f"cell-{model.pk}-seed"] = "fails"
    form[f"cell-{model.pk}-top_k"] = "no_effect"
    form[f"accepted-{model.pk}-temperature"] = "[1.0]"
    form[f"accepted-{model.pk}-n"] = "not json"  # the bad cell
    page = staff.post(url, form)
    assert page.status_code == 200
    assert not ParameterRule.objects.filter(model=model).exists()  # nothing saved
    html = page.content.decode()
    row = next(r for r in page.context["rows"] if r["model"] == model)
    cells = {c["parameter"]: c for c in row["cells"]}
    assert cells["seed"]["support"] == "fails"
    assert cells["top_k"]["support"] == "no_effect"
    assert cells["temperature"]["accepted"] == "[1.0]"
    assert cells["n"]["accepted"] == "not json"
    assert cells["n"]["errors"] == ["n: accepted values must be a JSON list, like [1.0]"]
    assert all(not c["errors"] for p, c in cells.items() if p != "n")
    cell = f"cell-{model.pk}-n"
    assert f'id="{cell}-accepts" value="not json"' in html
    assert f'aria-invalid="true" aria-describedby="{cell}-error"' in html
    assert f'<p class="cell-error" id="{cell}-error">n: accepted values must be' in html
    assert '<option value="fails" selected>fails</option>' in html
    # Fixed and posted again, every edit is saved.
    form[f"accepted-{model.pk}-n"] = ""
    assert staff.post(url, form).status_code == 302
    saved = {r.parameter: r for r in ParameterRule.objects.filter(model=model)}
    assert (saved["seed"].support, saved["top_k"].support) == ("fails", "no_effect")
    assert saved["temperature"].accepted_values == [1.0]


def test_every_matrix_control_has_a_label(staff, small_catalog):
    html = staff.get(reverse("admin:catalog_model_matrix")).content.decode()
    controls = re.findall(r'<(?:select|input) name="(?:cell|accepted)-[^"]*" id="([^"]+)"', html)
    labels = set(re.findall(r'<label for="([^"]+)"', html))
    assert controls and set(controls) <= labels
    assert "title=" not in html.split('id="matrix-form"')[1]


# --- the request log --------------------------------------------------------------------------


@pytest.fixture
def calls(db: None) -> tuple[Organization, Organization]:
    acme = organization_create(name="Acme Calls")
    other = organization_create(name="Other Calls")
    request_log_row(organization_id=acme.pk, request_id="req_acme_ok", prompt="SECRET PROMPT")
    request_log_row(
        organization_id=acme.pk,
        request_id="req_acme_503",
        status=RequestStatus.VENDOR_ERROR,
        http_status=503,
        model="solo-chat",
        vendor="solo",
        error_code="no_routable_offering",
    )
    request_log_row(
        organization_id=other.pk,
        request_id="req_other_ok",
        created_at=datetime(2020, 1, 2, tzinfo=UTC),
    )
    return acme, other


def _listed(client: Client, **params: str) -> set[str]:
    page = client.get(reverse("admin:inference_requestlog_changelist"), params)
    assert page.status_code == 200
    return {row.request_id for row in page.context["cl"].result_list}


def test_the_request_log_lists_filters_and_searches(staff, small_catalog, calls):
    acme, _ = calls
    assert _listed(staff) == {"req_acme_ok", "req_acme_503", "req_other_ok"}
    assert _listed(staff, organization=str(acme.pk)) == {"req_acme_ok", "req_acme_503"}
    assert _listed(staff, status__exact="vendor_error") == {"req_acme_503"}
    assert _listed(staff, model="solo-chat") == {"req_acme_503"}
    assert _listed(staff, vendor="openai") == {"req_acme_ok", "req_other_ok"}
    assert _listed(staff, q="req_other_ok") == {"req_other_ok"}
    assert _listed(staff, q="req_other") == set()  # the exact id only
    week = timezone.now() - timedelta(days=7)  # the date filter's "Past 7 days"
    assert _listed(staff, created_at__gte=week.isoformat()) == {"req_acme_ok", "req_acme_503"}
    listing = _text(staff.get(reverse("admin:inference_requestlog_changelist")).content.decode())
    assert "Acme Calls (acme-calls)" in listing
    assert "Other Calls (other-calls)" in listing


def test_the_request_log_is_read_only_and_never_shows_the_prompt(staff, calls):
    acme, _ = calls
    org_user = User.objects.create_user(email="k@example.com", password="x-long-password")
    project = project_create(organization=acme, name="p")
    key, raw = api_key_create(project=project, name="k", created_by=org_user)
    RequestLog.objects.filter(request_id="req_acme_ok").update(api_key_id=key.pk)
    row = RequestLog.objects.get(request_id="req_acme_ok")
    url = reverse("admin:inference_requestlog_change", args=[row.pk])
    page = staff.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "req_acme_ok" in html and "Acme Calls" in html
    assert "SECRET PROMPT" not in html and raw not in html and key.key_hash not in html
    assert reverse("admin:accounts_apikey_change", args=[key.pk]) in html
    assert 'name="' not in html.split('id="requestlog_form"')[1].split("</form>")[0].replace(
        'name="csrfmiddlewaretoken"', ""
    )
    assert staff.post(url, {"http_status": "200"}).status_code == 403
    assert staff.get(reverse("admin:inference_requestlog_add")).status_code == 403
    assert staff.get(reverse("admin:inference_requestlog_delete", args=[row.pk])).status_code == 403
    listing = staff.get(reverse("admin:inference_requestlog_changelist")).content.decode()
    assert "SECRET PROMPT" not in listing


def test_the_organization_page_links_its_calls(staff, calls):
    acme, _ = calls
    page = staff.get(reverse("admin:accounts_organization_change", args=[acme.pk]))
    link = f"{reverse('admin:inference_requestlog_changelist')}?organization={acme.pk}"
    assert f'href="{link}"' in page.content.decode()
    assert {r.request_id for r in staff.get(link).context["cl"].result_list} == {
        "req_acme_ok",
        "req_acme_503",
    }


# --- query counts -----------------------------------------------------------------------------


def _more_offerings(vendor: Vendor, count: int) -> None:
    for i in range(count):
        model = Model.objects.create(model_id=f"extra-{i}", owned_by="tests", capabilities=["chat"])
        Offering.objects.create(model=model, vendor=vendor, upstream_model=f"extra-{i}")


def test_the_vendor_page_costs_the_same_queries_for_any_number_of_offerings(
    staff, small_catalog, django_assert_max_num_queries
):
    solo = Vendor.objects.get(name="solo")
    url = reverse("admin:catalog_vendor_change", args=[solo.pk])
    staff.get(url)  # warm: session, content types
    with CaptureQueriesContext(connection) as few:
        assert staff.get(url).status_code == 200
    _more_offerings(solo, 25)
    with django_assert_max_num_queries(len(few)):
        page = staff.get(url)
    assert page.content.decode().count('name="offerings-') > 25 * 4
    assert len(few) <= 20


def test_the_model_page_costs_the_same_queries_for_any_number_of_offerings(
    staff, small_catalog, django_assert_max_num_queries
):
    model = Model.objects.get(model_id="both-embed")
    url = reverse("admin:catalog_model_change", args=[model.pk])
    staff.get(url)
    with CaptureQueriesContext(connection) as few:
        assert staff.get(url).status_code == 200
    for i in range(10):
        vendor = Vendor.objects.create(
            name=f"more-{i}", adapter_kind="openai", base_url="http://127.0.0.1:9/v1"
        )
        Offering.objects.create(model=model, vendor=vendor, upstream_model="e")
    with django_assert_max_num_queries(len(few)):
        assert staff.get(url).status_code == 200
