"""Fake vendors on 127.0.0.1 declared in the catalog, and API clients for the live app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from catalog.documents import catalog_load
from tests.fakes.vendors import FakeVendor

PRICE = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test price",
    "input_per_mtok_usd": "1.00",
    "cached_input_per_mtok_usd": "0.50",
    "output_per_mtok_usd": "2.00",
}
CHEAP_PRICE = {**PRICE, "input_per_mtok_usd": "0.10", "output_per_mtok_usd": "0.20"}


def _model(
    model_id: str,
    *,
    tier: int,
    caps: list[str],
    offerings: list[dict[str, Any]],
    parameters: dict[str, Any] | None = None,
    tasks: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "id": model_id,
        "display_name": model_id,
        "owned_by": "tests",
        "capabilities": caps,
        "tasks": tasks or ["chat"],
        "context_window": 32000,
        "max_output_tokens": 4096,
        "quality_tier": tier,
        "created": "2025-01-01",
        "parameters": parameters or {},
        "offerings": offerings,
    }


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
    """The catalog pointed at the fakes (verified without a probe).

    - ``test-large`` (tier 9; chat, vision, tools, json): primary (priority 10), backup (20)
    - ``test-small`` (tier 3; chat): primary — the cheapest
    - ``test-quirky`` (tier 2; chat): seed no effect, logit_bias fails,
      repetition_penalty only 1.0
    - ``claude-fake`` (tier 8; chat, vision, tools): anthro (Anthropic Messages)
    """
    monkeypatch.setenv("FAKE_ANTHROPIC_KEY", "sk-ant-test-secret")
    vendors = [
        {
            "name": "primary",
            "display_name": "Primary",
            "adapter_kind": "openai",
            "base_url": fakes["primary"].url,
            "credentials_env": "",
            "region": "eu",
            "enabled": True,
            "verified_models": fakes["primary"].models,
        },
        {
            "name": "backup",
            "display_name": "Backup",
            "adapter_kind": "openai",
            "base_url": fakes["backup"].url,
            "credentials_env": "",
            "region": "us",
            "enabled": True,
            "verified_models": fakes["backup"].models,
        },
        {
            "name": "anthro",
            "display_name": "Anthro",
            "adapter_kind": "anthropic",
            "base_url": fakes["anthro"].url,
            "credentials_env": "FAKE_ANTHROPIC_KEY",
            "region": "us",
            "enabled": True,
            "verified_models": fakes["anthro"].models,
        },
    ]
    models = [
        _model(
            "test-large",
            tier=9,
            caps=["chat", "vision", "tools", "json_mode", "responses"],
            offerings=[
                {
                    "vendor": "primary",
                    "upstream_model": "up-large",
                    "priority": 10,
                    "prices": [PRICE],
                },
                {
                    "vendor": "backup",
                    "upstream_model": "up-large",
                    "priority": 20,
                    "prices": [PRICE],
                },
            ],
        ),
        _model(
            "test-small",
            tier=3,
            caps=["chat"],
            offerings=[
                {"vendor": "primary", "upstream_model": "up-small", "prices": [CHEAP_PRICE]},
            ],
        ),
        _model(
            "test-quirky",
            tier=2,
            caps=["chat"],
            parameters={
                "seed": "no_effect",
                "logit_bias": "fails",
                "repetition_penalty": {"support": "fails", "accepted_values": [1.0]},
            },
            offerings=[
                {"vendor": "primary", "upstream_model": "up-quirky", "prices": [PRICE]},
            ],
        ),
        _model(
            "claude-fake",
            tier=8,
            caps=["chat", "vision", "tools"],
            parameters={"n": "fails"},
            offerings=[
                {"vendor": "anthro", "upstream_model": "claude-fake", "prices": [PRICE]},
            ],
        ),
    ]
    # Leave the seed's vendors out of the way: only the fakes are routable in these tests.
    from catalog.models import Vendor

    Vendor.objects.exclude(name__in=[v["name"] for v in vendors]).update(enabled=False)
    catalog_load({"vendors": vendors, "models": models})
    return fakes


@pytest.fixture
def client_for(api_base: str) -> Callable[..., openai.OpenAI]:
    """``client_for(key, max_retries=0)``: the official SDK pointed at the live app."""

    def make(key: str, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("max_retries", 0)
        return openai.OpenAI(base_url=api_base, api_key=key, **kwargs)

    return make
