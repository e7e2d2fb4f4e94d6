"""The model list, from the catalog snapshot (no database query per call).

- ``GET /v1/models`` (key): OpenAI's list shape — the routing modes ``auto``, ``cheapest``,
  ``smartest`` and every model a verified, routable offering serves.
- ``GET /v1/models/{model}`` (key): the OpenAI model object plus capabilities, context window,
  parameter matrix row, prices per 1M tokens in USD (exact decimal strings) and availability per
  offering; ``vendor/model`` works; 404 ``model_not_found`` otherwise.
- ``GET /v1/ai/models?capability=&vendor=&task=`` (public): every catalog model with its
  availability and prices, filtered.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.utils import timezone

from catalog import health
from catalog.models import Capability, Parameter
from catalog.routing import ROUTING_MODES, resolve_model_name, routing_mode
from catalog.selectors import catalog_snapshot, listed_models, models_matching
from catalog.types import (
    CatalogSnapshot,
    CircuitState,
    ModelView,
    OfferingView,
    VendorHealth,
)
from config.errors import InvalidRequest, NotFound
from inference.http import ApiRequest, Response, json_response, route
from money.pricing import PriceSnapshot
from money.usd import nanos_to_usd_str

_MODES_CREATED = 1735689600  # 2025-01-01T00:00:00Z
_MODE_DESCRIPTIONS = {
    "auto": "Balanced routing across healthy vendors (extra_body: task, prefer).",
    "cheapest": "The lowest expected cost among models that can serve the request.",
    "smartest": "The highest quality tier among models that can serve the request.",
}


def _mode_object(mode: str, *, details: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": mode,
        "object": "model",
        "created": _MODES_CREATED,
        "owned_by": "infrai",
    }
    if details:
        body.update(routing_mode=True, description=_MODE_DESCRIPTIONS[mode])
    return body


def _model_object(model: ModelView, *, model_id: str | None = None) -> dict[str, Any]:
    return {
        "id": model_id or model.model_id,
        "object": "model",
        "created": model.created,
        "owned_by": model.owned_by,
    }


def _pricing(price: PriceSnapshot | None) -> dict[str, Any] | None:
    """Prices in USD as exact decimal strings (per 1M tokens, image, 1M chars, second)."""
    if price is None:
        return None
    out: dict[str, Any] = {
        "input_per_1m_tokens_usd": nanos_to_usd_str(price.input_per_mtok_nanos),
        "cached_input_per_1m_tokens_usd": nanos_to_usd_str(price.cached_input_per_mtok_nanos),
        "cache_write_5m_per_1m_tokens_usd": nanos_to_usd_str(price.cache_write_5m_per_mtok_nanos),
        "cache_write_1h_per_1m_tokens_usd": nanos_to_usd_str(price.cache_write_1h_per_mtok_nanos),
        "output_per_1m_tokens_usd": nanos_to_usd_str(price.output_per_mtok_nanos),
        "reasoning_per_1m_tokens_usd": nanos_to_usd_str(price.reasoning_per_mtok_nanos),
    }
    if price.per_image_nanos:
        out["per_image_usd"] = {
            k: nanos_to_usd_str(v) for k, v in sorted(price.per_image_nanos.items())
        }
    if price.per_mchar_nanos:
        out["per_1m_characters_usd"] = nanos_to_usd_str(price.per_mchar_nanos)
    if price.per_audio_second_nanos:
        out["per_audio_second_usd"] = nanos_to_usd_str(price.per_audio_second_nanos)
    return out


def _offering_status(
    offering: OfferingView, vendor_health: Mapping[str, VendorHealth], now: datetime
) -> dict[str, Any]:
    found = vendor_health.get(offering.vendor, VendorHealth())
    reason = offering.unroutable_reason
    if reason is None and found.state is CircuitState.OPEN:
        reason = f"vendor {offering.vendor} is failing right now"
    return {
        "vendor": offering.vendor,
        "region": offering.region,
        "upstream_model": offering.upstream_model,
        "available": reason is None,
        "reason": reason,
        "circuit": found.state.value,
        "pricing": _pricing(offering.price_at(now)),
    }


def _availability(
    snapshot: CatalogSnapshot,
    model: ModelView,
    vendor_health: Mapping[str, VendorHealth],
    *,
    vendor: str | None = None,
) -> dict[str, Any]:
    now = timezone.now()
    offerings = [
        _offering_status(o, vendor_health, now)
        for o in snapshot.offerings_of(model.model_id)
        if vendor in (None, o.vendor)
    ]
    usable = [o for o in offerings if o["available"]]
    return {
        "available": bool(usable),
        "vendors": [o["vendor"] for o in usable],
        "pricing": (usable or offerings or [{"pricing": None}])[0]["pricing"],
        "offerings": offerings,
    }


def _details(model: ModelView) -> dict[str, Any]:
    return {
        "display_name": model.display_name,
        "capabilities": sorted(model.capabilities),
        "tasks": sorted(model.tasks),
        "context_window": model.context_window,
        "max_output_tokens": model.max_output_tokens,
        "default_output_tokens": model.default_output_tokens or None,
        "quality_tier": model.quality_tier,
        "embedding_dimensions": model.embedding_dimensions,
    }


async def list_models(request: ApiRequest) -> Response:
    """The OpenAI list shape: routing modes, then every routable model by id."""
    snapshot = await catalog_snapshot()
    data = [_mode_object(m) for m in ROUTING_MODES]
    data += [_model_object(m) for m in listed_models(snapshot)]
    return json_response({"object": "list", "data": data})


async def retrieve_model(request: ApiRequest) -> Response:
    """One model (or routing mode) with details, or 404 ``model_not_found``."""
    name = request.path_params["model"]
    mode = routing_mode(name)
    if mode is not None:
        return json_response(_mode_object(mode, details=True))
    snapshot = await catalog_snapshot()
    resolved = resolve_model_name(snapshot, name)
    if resolved is None:
        raise NotFound(
            f"The model '{name}' does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    model, vendor = resolved
    if vendor is not None and not any(
        o.vendor == vendor for o in snapshot.offerings_of(model.model_id)
    ):
        raise NotFound(
            f"Vendor '{vendor}' does not serve the model '{model.model_id}'.",
            code="model_not_found",
            param="model",
        )
    vendor_health = await health.ahealth_of(snapshot.vendors)
    body = _model_object(model, model_id=f"{vendor}/{model.model_id}" if vendor else None)
    body.update(_details(model))
    body["parameters"] = {
        p: {
            "support": model.rule(p).support.value,
            "accepted_values": list(model.rule(p).accepted_values),
        }
        for p in Parameter.values
    }
    body["availability"] = _availability(snapshot, model, vendor_health, vendor=vendor)
    return json_response(body)


def _query_value(request: ApiRequest, name: str) -> str | None:
    values = request.query.get(name)
    return values[0].strip() or None if values else None


async def public_models(request: ApiRequest) -> Response:
    """Every catalog model with availability and prices (public; filterable)."""
    capability = _query_value(request, "capability")
    if capability is not None and capability not in Capability.values:
        raise InvalidRequest(
            f"Invalid value for 'capability': {capability!r}. "
            f"Use one of: {', '.join(Capability.values)}.",
            code="invalid_value",
            param="capability",
        )
    vendor = _query_value(request, "vendor")
    task = _query_value(request, "task")
    snapshot = await catalog_snapshot()
    vendor_health = await health.ahealth_of(snapshot.vendors)
    data = []
    for model in models_matching(snapshot, capability=capability, vendor=vendor, task=task):
        availability = _availability(snapshot, model, vendor_health, vendor=vendor)
        data.append(
            {
                **_model_object(model),
                **_details(model),
                "available": availability["available"],
                "vendors": availability["vendors"],
                "pricing": availability["pricing"],
            }
        )
    return json_response({"object": "list", "data": data})


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/models", methods={"GET": list_models}),
    route("/v1/models/{model:path}", methods={"GET": retrieve_model}),
    route("/v1/ai/models", methods={"GET": public_models}, authenticated=False),
)
