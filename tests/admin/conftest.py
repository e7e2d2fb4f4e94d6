"""Fixtures of the staff-admin tests: a logged-in superuser and a small routable catalog."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from accounts.models import User
from catalog.documents import catalog_load
from catalog.models import Vendor
from catalog.selectors import catalog_snapshot_forget
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering


@pytest.fixture(autouse=True)
def _fresh_snapshot(settings: Any) -> Iterator[None]:
    settings.INFRAI_CATALOG_CHECK_S = 0
    catalog_snapshot_forget()
    yield
    catalog_snapshot_forget()


@pytest.fixture
def staff_user(db: None) -> User:
    return User.objects.create_superuser(email="ops@infrai.test", password="x-long-password")


@pytest.fixture
def staff(staff_user: User) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


@pytest.fixture
def small_catalog(db: None) -> None:
    """The seed's vendors disabled; what can be routed: ``solo-chat`` (the only chat model,
    vendor ``solo`` only) and ``both-embed`` (embeddings, from ``solo`` and ``backup``).
    Neither vendor needs credentials and both are verified."""
    Vendor.objects.update(enabled=False)
    vendors = [
        catalog_vendor("solo", base_url="http://127.0.0.1:9/v1", verified_models=["c", "e"]),
        catalog_vendor("backup", base_url="http://127.0.0.1:9/v1", verified_models=["e"]),
    ]
    models = [
        catalog_model(
            "solo-chat", capabilities=["chat", "tools"], offerings=[offering("solo", "c", PRICE)]
        ),
        catalog_model(
            "both-embed",
            capabilities=["embeddings"],
            offerings=[offering("solo", "e", PRICE), offering("backup", "e", PRICE)],
        ),
    ]
    catalog_load({"vendors": vendors, "models": models})


# The browser of the dashboard's tests (one per module; Debian's chromium).
from tests.dashboard.conftest import (  # noqa: E402, F401
    browser,
    browser_type,
    browser_type_launch_args,
    playwright,
)
