"""Fake vendors on 127.0.0.1 declared in the catalog, and API clients for the live app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import SEED_PATH, catalog_load
from catalog.models import Offering
from catalog.selectors import price_in_force
from money.pricing import PriceSnapshot, Usage, cost_nanos
from tests.catalog_docs import PRICE, catalog_model, catalog_vendor, offering
from tests.fakes.vendors import FakeVendor

CHEAP_PRICE = {**PRICE, "input_per_mtok_usd": "0.10", "output_per_mtok_usd": "0.20"}


@pytest.fixture(scope="session")
def _fake_servers() -> Iterator[dict[str, FakeVendor]]:
    servers = {
        "primary": FakeVendor(models=["up-large", "up-small", "up-quirky"]).start(),
        "backup": FakeVendor(models=["up-large"]).start(),
        "anthro": FakeVendor(models=["claude-fake"]).start(),
    }
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def fakes(_fake_servers: dict[str, FakeVendor]) -> dict[str, FakeVendor]:
    """Three fake vendors: ``primary`` and ``backup`` (OpenAI-compatible), ``anthro``."""
    for server in _fake_servers.values():
        server.reset()
    return _fake_servers


@pytest.fixture
def fake_catalog(
    fakes: dict[str, FakeVendor], transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> dict[str, FakeVendor]:
    """The catalog pointed at the fakes (verified without a probe): :func:`fake_catalog_load`."""
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test-secret")
    fake_catalog_load(fakes)
    return fakes


def fake_catalog_load(fakes: dict[str, FakeVendor]) -> None:
    """Load the catalog pointed at ``fakes`` (``primary``, ``backup``, ``anthro``; verified
    without a probe) into the database, and disable every other vendor. The ``anthro`` vendor
    reads its key from ``FAKE_ANTHROPIC_KEY``.

    - ``test-large`` (tier 9; chat, vision, tools, json): primary (priority 10), backup (20)
    - ``test-small`` (tier 3; chat): primary — the cheapest
    - ``test-quirky`` (tier 2; chat): seed no effect, logit_bias fails,
      repetition_penalty only 1.0
    - ``claude-fake`` (tier 8; chat, vision, tools): anthro (Anthropic Messages)
    """
    vendors = [
        catalog_vendor(name, base_url=fakes[name].url, verified_models=fakes[name].models, **more)
        for name, more in (
            ("primary", {"display_name": "Primary"}),
            ("backup", {"display_name": "Backup", "region": "us"}),
            ("anthro", {"display_name": "Anthro", "region": "us", "adapter_kind": "anthropic",
                        "credentials_env": "FAKE_ANTHROPIC_KEY"}),
        )
    ]  # fmt: skip
    models = [
        catalog_model(
            "test-large",
            quality_tier=9,
            capabilities=["chat", "vision", "tools", "json_mode", "responses"],
            offerings=on_fakes(PRICE),
        ),
        catalog_model(
            "test-small",
            quality_tier=3,
            capabilities=["chat"],
            offerings=[offering("primary", "up-small", CHEAP_PRICE)],
        ),
        catalog_model(
            "test-quirky",
            quality_tier=2,
            capabilities=["chat"],
            parameters={
                "seed": "no_effect",
                "logit_bias": "fails",
                "repetition_penalty": {"support": "fails", "accepted_values": [1.0]},
            },
            offerings=[offering("primary", "up-quirky", PRICE)],
        ),
        catalog_model(
            "claude-fake",
            quality_tier=8,
            capabilities=["chat", "vision", "tools"],
            parameters={"n": "fails"},
            offerings=[offering("anthro", "claude-fake", PRICE)],
        ),
    ]
    # Leave the seed's vendors out of the way: only the fakes are routable in these tests.
    from catalog.models import Vendor

    Vendor.objects.exclude(name__in=[v["name"] for v in vendors]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})


LOCAL_MODELS = (
    "SmolLM2-135M-Instruct",
    "all-MiniLM-L6-v2",
    "infrai-moderation-minilm",
    "piper-en-us-joe",
    "whisper-tiny.en",
)
IMAGE_PRICE = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test price (per image)",
    "per_image_usd": {"1024x1024/standard": "0.04", "1024x1024/hd": "0.08", "*": "0.10"},
}
EMBED_PRICE = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test price",
    "input_per_mtok_usd": "0.02",
    "cached_input_per_mtok_usd": "0.02",
}


def offering_price(model: str, vendor: str) -> PriceSnapshot:
    """The price in force now of ``model`` as ``vendor`` serves it (from the database)."""
    from django.utils import timezone

    offering = Offering.objects.get(model__model_id=model, vendor__name=vendor)
    price = price_in_force(offering_id=offering.pk, at=timezone.now())
    assert price is not None
    return price


def assert_billed(request_id: str, *, model: str, vendor: str, usage: Usage) -> int:
    """Assert the ledger charged ``usage`` at the offering's price for ``request_id`` (no entry
    when that is free) and that no hold is left open; returns the cost in nano-USD."""
    expected = cost_nanos(price=offering_price(model, vendor), usage=usage)
    entries = list(LedgerEntry.objects.filter(request_id=request_id))
    assert [e.amount_nanos for e in entries] == ([-expected] if expected else [])
    assert Hold.objects.get(request_id=request_id).status != HoldStatus.OPEN
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    return expected


def assert_400_before_any_hold(
    api_base: str, key: str, path: str, body: dict[str, Any], param: str
) -> httpx.Response:
    """``body`` posted to ``/v1/<path>`` with ``key`` is a 400 whose error names ``param``, and
    no hold was opened; returns the response for the caller's own checks."""
    response = httpx.post(
        f"{api_base}/{path}", json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert not Hold.objects.exists()
    return response


def on_fakes(price: dict[str, Any]) -> list[dict[str, Any]]:
    """Offerings of a model on both fake vendors (primary first, then backup) at ``price``."""
    return [
        {"vendor": name, "upstream_model": "up-large", "priority": p, "prices": [price]}
        for name, p in (("primary", 10), ("backup", 20))
    ]


def load_gateway_catalog(
    backend_url: str, local_models: tuple[str, ...], models: list[dict[str, Any]]
) -> None:
    """The seed's ``infrai-gpu`` vendor pointed at the session's gpu-backend (verified without
    a probe) with ``local_models`` from the seed at seed prices, plus ``models``."""
    seed = yaml.safe_load(SEED_PATH.read_text())
    gpu = next(v for v in seed["vendors"] if v["name"] == "infrai-gpu")
    gpu = {
        **gpu,
        "base_url": backend_url + "/v1",
        "base_url_setting": "",
        "enabled": True,
        "verified_models": list(local_models),
    }
    local = [m for m in seed["models"] if m["id"] in local_models]
    catalog_load({"vendors": [gpu], "models": [*local, *models]})


def image_and_embedding_models() -> list[dict[str, Any]]:
    """``test-image`` and ``test-embed`` on both fakes, as :func:`gateway_catalog` lists them."""
    return [
        catalog_model(
            "test-image", quality_tier=7, capabilities=["images"], offerings=on_fakes(IMAGE_PRICE)
        ),
        catalog_model(
            "test-embed",
            quality_tier=6,
            capabilities=["embeddings"],
            offerings=on_fakes(EMBED_PRICE),
        ),
    ]


@pytest.fixture
def gateway_catalog(
    fake_catalog: dict[str, FakeVendor],
    backend_url: str,
) -> dict[str, FakeVendor]:
    """:func:`fake_catalog` plus the real gpu-backend's local models and fake image/embedding
    models, for the non-chat endpoints.

    - the seed's ``infrai-gpu`` vendor and local models (seed prices), pointed at the session's
      gpu-backend and verified without a probe;
    - ``test-image`` (tier 7; images): primary (priority 10), backup (20) — per-image prices
      ``1024x1024/standard`` $0.04, ``1024x1024/hd`` $0.08, other sizes $0.10;
    - ``test-embed`` (tier 6; embeddings): primary (10), backup (20) at $0.02 / 1M tokens.
    """
    load_gateway_catalog(backend_url, LOCAL_MODELS, image_and_embedding_models())
    return fake_catalog


@pytest.fixture
def client_for(api_base: str) -> Callable[..., openai.OpenAI]:
    """``client_for(key, max_retries=0)``: the official SDK pointed at the live app."""

    def make(key: str, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("max_retries", 0)
        return openai.OpenAI(base_url=api_base, api_key=key, **kwargs)

    return make
