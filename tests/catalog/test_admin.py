"""Staff pages: the matrix editor changes routing and is recorded; vendors show health."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
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
