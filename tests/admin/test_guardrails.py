"""Staff guardrails: an admin change that would leave a capability with no routable offering
asks first, on a page naming what stops working, and is saved only when confirmed."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from catalog.documents import catalog_load
from catalog.models import Model, Offering, Vendor
from catalog.selectors import build_snapshot, capability_coverage
from tests.admin.forms import form_data
from tests.catalog_docs import PRICE, catalog_model, offering

pytestmark = pytest.mark.django_db


def _change_page(client: Client, model: type, pk: int) -> tuple[str, str]:
    name = model._meta.model_name
    url = reverse(f"admin:catalog_{name}_change", args=[pk])
    page = client.get(url)
    assert page.status_code == 200
    return url, page.content.decode()


def _serves(capability: str) -> frozenset[str]:
    return capability_coverage(build_snapshot(), at=timezone.now()).get(capability, frozenset())


def _untick_capabilities(client: Client, model: Model):  # type: ignore[no-untyped-def]
    url, html = _change_page(client, Model, model.pk)
    return url, client.post(url, form_data(html, "model_form", capabilities=None, _save="Save"))


def test_unticking_the_only_chat_models_capabilities_asks_naming_chat(
    staff, small_catalog, django_capture_on_commit_callbacks
):
    model = Model.objects.get(model_id="solo-chat")
    assert _serves("chat") == {"solo-chat"}
    with django_capture_on_commit_callbacks() as bumps:
        _, page = _untick_capabilities(staff, model)
    assert page.status_code == 200
    assert page.templates[0].name == "admin/catalog/confirm_capability_loss.html"
    html = page.content.decode()
    assert "<strong>chat</strong> (Chat) — served until now by\n      solo-chat" in html
    assert "<strong>tools</strong>" in html
    assert "embeddings" not in html  # still served: not named
    assert [loss.capability for loss in page.context["impact"].losses] == ["chat", "tools"]
    # Nothing was saved: the row, the history and the catalog version are as they were.
    model.refresh_from_db()
    assert model.capabilities == ["chat", "tools"]
    assert LogEntry.objects.count() == 0
    assert bumps == []
    assert _serves("chat") == {"solo-chat"}


def test_confirming_saves_the_change(staff, small_catalog, django_capture_on_commit_callbacks):
    model = Model.objects.get(model_id="solo-chat")
    url, page = _untick_capabilities(staff, model)
    confirmed = form_data(page.content.decode(), "confirm-form")
    assert confirmed["_confirm_capability_loss"] == "chat,tools"
    with django_capture_on_commit_callbacks(execute=True) as bumps:
        saved = staff.post(url, confirmed)
    assert saved.status_code == 302
    model.refresh_from_db()
    assert model.capabilities == []
    assert LogEntry.objects.get(object_id=str(model.pk)).user_id is not None
    assert bumps  # the catalog version is bumped
    assert _serves("chat") == frozenset()


def test_cancelling_leaves_the_catalog_unchanged(staff, small_catalog):
    model = Model.objects.get(model_id="solo-chat")
    url, page = _untick_capabilities(staff, model)
    cancel = page.context["cancel_url"]
    assert cancel == url
    assert f'href="{cancel}"' in page.content.decode()
    back = staff.get(cancel)
    assert back.status_code == 200
    assert back.context["adminform"].form.initial["capabilities"] == ["chat", "tools"]
    model.refresh_from_db()
    assert model.capabilities == ["chat", "tools"]


def test_a_confirmation_for_other_losses_asks_again(staff, small_catalog):
    model = Model.objects.get(model_id="solo-chat")
    url, html = _change_page(staff, Model, model.pk)
    data = form_data(html, "model_form", capabilities=["chat"], _confirm_capability_loss="chat")
    page = staff.post(url, data)  # loses tools only, but "chat" was confirmed
    assert page.status_code == 200
    assert page.context["impact"].token == "tools"
    model.refresh_from_db()
    assert model.capabilities == ["chat", "tools"]


@pytest.mark.parametrize(
    "edit",
    [{"enabled": None}, {"credentials_env": "INFRAI_TEST_KEY_NOBODY_SET"}],
    ids=["disabled", "credentials-not-configured"],
)
def test_disabling_the_only_vendor_asks_naming_what_stops(staff, small_catalog, edit):
    solo = Vendor.objects.get(name="solo")
    url, html = _change_page(staff, Vendor, solo.pk)
    page = staff.post(url, form_data(html, "vendor_form", **edit))
    assert page.status_code == 200
    impact = page.context["impact"]
    assert [(x.capability, x.models) for x in impact.losses] == [
        ("chat", ("solo-chat",)),
        ("tools", ("solo-chat",)),
    ]
    assert impact.models == ("solo-chat",)  # both-embed is still served by backup
    assert "Models no longer served at all: solo-chat." in page.content.decode()
    solo.refresh_from_db()
    assert solo.enabled and solo.credentials_env == ""


def test_disabling_the_only_offering_inline_asks(staff, small_catalog):
    model = Model.objects.get(model_id="solo-chat")
    url, html = _change_page(staff, Model, model.pk)
    page = staff.post(url, form_data(html, "model_form", **{"offerings-0-enabled": None}))
    assert page.status_code == 200
    assert page.context["impact"].token == "chat,tools"
    assert Offering.objects.get(model=model).enabled


@pytest.mark.parametrize("vendor", ["backup", "solo"])
def test_a_harmless_change_saves_directly(staff, small_catalog, vendor):
    """Disabling backup leaves embeddings with solo; renaming solo stops nothing."""
    row = Vendor.objects.get(name=vendor)
    url, html = _change_page(staff, Vendor, row.pk)
    edit = {"enabled": None} if vendor == "backup" else {"display_name": "Solo, renamed"}
    page = staff.post(url, form_data(html, "vendor_form", **edit))
    assert page.status_code == 302
    row.refresh_from_db()
    assert (row.enabled, row.display_name) == (
        (False, "backup") if vendor == "backup" else (True, "Solo, renamed")
    )
    assert _serves("embeddings") == {"both-embed"}


def test_the_vendor_serving_chat_cannot_be_deleted(staff, small_catalog):
    """Deleting never stops routing unasked: what serves has prices, and prices are history."""
    solo = Vendor.objects.get(name="solo")
    page = staff.get(reverse("admin:catalog_vendor_delete", args=[solo.pk]))
    assert page.status_code == 200
    assert page.context["perms_lacking"] == {"price"}
    refused = staff.post(reverse("admin:catalog_vendor_delete", args=[solo.pk]), {"post": "yes"})
    assert refused.status_code == 403
    assert _serves("chat") == {"solo-chat"}


def test_coverage_counts_only_offerings_routing_can_use(small_catalog):
    """A model whose only price starts later serves nothing yet, as routing charges no price
    before its ``effective_from``; a disabled vendor's offerings serve nothing."""
    later = {**PRICE, "effective_from": "2099-01-01T00:00:00Z"}
    catalog_load(
        {
            "models": [
                catalog_model(
                    "later-img", capabilities=["images"], offerings=[offering("solo", "c", later)]
                )
            ]
        }
    )
    assert _serves("images") == frozenset()
    assert _serves("embeddings") == {"both-embed"}
    Vendor.objects.filter(name__in=["solo", "backup"]).update(enabled=False)
    assert _serves("embeddings") == frozenset()
