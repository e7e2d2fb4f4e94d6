"""Fixtures for the catalog tests: the shipped seed, with vendors made routable on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from catalog.documents import SEED_PATH, catalog_load, read_document
from catalog.models import Offering, Vendor
from catalog.selectors import build_snapshot, catalog_snapshot_forget
from catalog.services import vendor_verify
from catalog.types import CatalogSnapshot

NOW = datetime(2025, 6, 1, tzinfo=UTC)
VENDOR_KEYS = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "dashscope": "DASHSCOPE_API_KEY",
}


@pytest.fixture(autouse=True)
def _fresh_snapshot(settings: Any) -> Iterator[None]:
    settings.INFRAI_CATALOG_CHECK_S = 0
    catalog_snapshot_forget()
    yield
    catalog_snapshot_forget()


@pytest.fixture
def seeded(db: None) -> None:
    """The shipped catalog (the migration loaded it already; loading again is idempotent)."""
    catalog_load(read_document(SEED_PATH))


@pytest.fixture
def make_routable(seeded: None, monkeypatch: pytest.MonkeyPatch) -> Callable[..., CatalogSnapshot]:
    """``make_routable("openai", ...)``: credentials set and every upstream model verified."""

    def routable(*vendors: str) -> CatalogSnapshot:
        for name in vendors:
            if name in VENDOR_KEYS:
                monkeypatch.setenv(VENDOR_KEYS[name], f"test-key-{name}")
            vendor = Vendor.objects.get(name=name)
            upstream = Offering.objects.filter(vendor=vendor).values_list(
                "upstream_model", flat=True
            )
            vendor_verify(vendor=vendor, models=list(upstream))
        return build_snapshot(version="test")

    return routable
