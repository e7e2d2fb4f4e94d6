"""catalog: the cache-write and reasoning prices of a price row, their defaults in one place
(``catalog.selectors.price_snapshot``), and how catalog documents write them."""

from __future__ import annotations

import pytest

from catalog.documents import catalog_dump, catalog_load
from catalog.models import Offering, Price
from catalog.selectors import price_snapshot
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering


def test_empty_cache_write_and_reasoning_prices_take_the_catalog_defaults() -> None:
    row = Price(input_per_mtok_nanos=3_000_000_001, output_per_mtok_nanos=15_000_000_000)
    snapshot = price_snapshot(row)
    # 1.25× and 2× the input price, rounded up to a whole nano-USD per 1M tokens.
    assert snapshot.cache_write_5m_per_mtok_nanos == 3_750_000_002
    assert snapshot.cache_write_1h_per_mtok_nanos == 6_000_000_002
    assert snapshot.reasoning_per_mtok_nanos == 15_000_000_000


def test_prices_set_on_the_row_win_and_zero_is_free_not_the_default() -> None:
    row = Price(
        input_per_mtok_nanos=1_000,
        cache_write_5m_per_mtok_nanos=0,
        cache_write_1h_per_mtok_nanos=7,
        output_per_mtok_nanos=2_000,
        reasoning_per_mtok_nanos=9_000,
    )
    snapshot = price_snapshot(row)
    assert (
        snapshot.cache_write_5m_per_mtok_nanos,
        snapshot.cache_write_1h_per_mtok_nanos,
        snapshot.reasoning_per_mtok_nanos,
    ) == (0, 7, 9_000)


@pytest.mark.django_db
def test_a_catalog_document_leaves_them_empty_or_sets_them_and_dumps_them_back() -> None:
    vendor = catalog_vendor("pricey", base_url="http://127.0.0.1:9/v1", verified_models=[])
    explicit = {
        **PRICE,
        "effective_from": "2026-01-01T00:00:00Z",
        "cache_write_5m_per_mtok_usd": "0",
        "cache_write_1h_per_mtok_usd": "2.5",
        "reasoning_per_mtok_usd": "4",
    }
    model = catalog_model(
        "pricey-model", capabilities=["chat"], offerings=[offering("pricey", "up", PRICE)]
    )
    model["offerings"][0]["prices"].append(explicit)
    catalog_load({"vendors": [vendor], "models": [model]})
    rows = list(
        Price.objects.filter(offering=Offering.objects.get(vendor__name="pricey")).order_by(
            "effective_from"
        )
    )
    assert [
        (
            r.cache_write_5m_per_mtok_nanos,
            r.cache_write_1h_per_mtok_nanos,
            r.reasoning_per_mtok_nanos,
        )
        for r in rows
    ] == [(None, None, None), (0, 2_500_000_000, 4_000_000_000)]
    dumped = next(m for m in catalog_dump()["models"] if m["id"] == "pricey-model")
    left_empty, set_explicitly = dumped["offerings"][0]["prices"]
    assert "cache_write_5m_per_mtok_usd" not in left_empty
    assert "reasoning_per_mtok_usd" not in left_empty
    assert set_explicitly["cache_write_5m_per_mtok_usd"] == "0"  # free, written as such
    assert set_explicitly["cache_write_1h_per_mtok_usd"] == "2.5"
    assert set_explicitly["reasoning_per_mtok_usd"] == "4"
