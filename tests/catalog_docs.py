"""Builders of catalog documents (what :func:`catalog.documents.catalog_load` reads) for tests.

Each returns one plain dict in the document's shape, with the defaults the tests share; a test
names only what it is about. :data:`PRICE` is the token price most test models are sold at;
:data:`SPEC_MODELS` the spec's six models.
"""

from __future__ import annotations

from typing import Any

# The six models of the spec, as the seed lists them (``infrai-gpu`` serves them in production).
SPEC_MODELS = [
    "gpt-oss-120b",
    "gemma-4-31B-it",
    "DeepSeek-V3.1",
    "DeepSeek-V3.2",
    "Meta-Llama-3.3-70B-Instruct",
    "MiniMax-M3",
]
PRICE: dict[str, Any] = {
    "effective_from": "2025-01-01T00:00:00Z",
    "source": "test price",
    "input_per_mtok_usd": "1.00",
    "cached_input_per_mtok_usd": "0.50",
    "output_per_mtok_usd": "2.00",
}


def catalog_vendor(
    name: str,
    *,
    base_url: str,
    verified_models: list[str] | None,
    display_name: str = "",
    adapter_kind: str = "openai",
    credentials_env: str = "",
    region: str = "eu",
) -> dict[str, Any]:
    """An enabled vendor entry; ``verified_models=None`` leaves them to a probe (the key is
    absent), a list marks them verified without one."""
    vendor: dict[str, Any] = {
        "name": name,
        "display_name": display_name or name,
        "adapter_kind": adapter_kind,
        "base_url": base_url,
        "credentials_env": credentials_env,
        "region": region,
        "enabled": True,
    }
    if verified_models is not None:
        vendor["verified_models"] = verified_models
    return vendor


def catalog_model(
    model_id: str,
    *,
    capabilities: list[str],
    offerings: list[dict[str, Any]],
    tasks: list[str] | None = None,
    quality_tier: int = 5,
    context_window: int = 32000,
    max_output_tokens: int = 4096,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A model entry owned by ``tests``; ``tasks`` defaults to ``["chat"]``."""
    return {
        "id": model_id,
        "display_name": model_id,
        "owned_by": "tests",
        "capabilities": capabilities,
        "tasks": tasks or ["chat"],
        "context_window": context_window,
        "max_output_tokens": max_output_tokens,
        "quality_tier": quality_tier,
        "created": "2025-01-01",
        "parameters": parameters or {},
        "offerings": offerings,
    }


def offering(
    vendor: str, upstream_model: str, price: dict[str, Any], *, priority: int | None = None
) -> dict[str, Any]:
    """One offering of a model: ``vendor`` serves it as ``upstream_model`` at ``price``
    (``priority``: lower is tried first; default the document's)."""
    entry: dict[str, Any] = {"vendor": vendor, "upstream_model": upstream_model, "prices": [price]}
    if priority is not None:
        entry["priority"] = priority
    return entry
