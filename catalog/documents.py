"""The catalog as one readable document (YAML or JSON): ``manage.py catalog dump`` / ``load``.

Shape (see ``catalog/seed/catalog.yaml`` and ``docs/catalog.md``)::

    vendors:
      - {name, display_name, adapter_kind, base_url, base_url_setting, credentials_env,
         region, api_version, enabled, notes, verified_models?,
         parameter_rules: {<parameter>: {support: fails | no_effect, source: <docs URL>,
                                         note?, accepted_values?}}}
    models:
      - id, display_name, owned_by, description, capabilities, tasks, context_window,
        max_output_tokens, default_output_tokens, embedding_dimensions, quality_tier, tokenizer,
        created
        parameters: {<parameter>: <support> | {support, accepted_values, max_value, note}}
        offerings:
          - vendor, upstream_model, priority, enabled, batch_discount_percent?
            prices: [{effective_from, source, input_per_mtok_usd, cached_input_per_mtok_usd,
                      cache_write_5m_per_mtok_usd?, cache_write_1h_per_mtok_usd?,
                      output_per_mtok_usd, reasoning_per_mtok_usd?,
                      per_image_usd: {"<size>/<quality>": usd},
                      per_mchar_usd, per_audio_second_usd}]
    offerings:   # optional: offerings listed apart from their model (the hosted presets)
      - model, vendor, upstream_model, priority, enabled, batch_discount_percent?, prices: [...]

Prices are written as exact USD decimal *strings* (``"0.15"``) and stored as integer nano-USD;
a float in a price is refused. A price left out is 0, except the optional ones (``?``): left
out, they are the catalog's defaults (1.25× / 2× the input price for cache writes, the output
price for reasoning). An offering's ``batch_discount_percent`` (an integer 0-100: the Batch API's
discount on its prices) left out keeps what the offering has (50 for a new one; staff edit it
in the admin). Loading upserts by natural key (vendor name, model id,
vendor+model, offering+``effective_from``, model+parameter) and deletes nothing, so loading the
same file twice changes nothing and a test can add a vendor on top of the seed. A vendor's
``verified_models`` (optional) marks those upstream models verified without a probe. A dump
leaves probe state (verified models) out.

:func:`catalog_load` takes the app registry so the seed data migration can run it on the
historical models; fields the registry's models lack are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from django.apps import apps as django_apps
from django.apps.registry import Apps
from django.db import transaction
from django.utils import timezone

from catalog import validation
from catalog.models import (
    MODEL_FIELDS,
    USD_PRICES,
    VENDOR_FIELDS,
    Model,
    Offering,
    ParameterRule,
    Price,
    UsdPrice,
    Vendor,
)
from money.usd import nanos_to_usd_str, usd_to_nanos

SEED_PATH = Path(__file__).resolve().parent / "seed" / "catalog.yaml"


class CatalogDocumentError(ValueError):
    """The document is not a valid catalog; the message says where."""


@dataclass(frozen=True, slots=True)
class LoadResult:
    vendors: int
    models: int
    offerings: int
    prices: int
    rules: int


def read_document(path: Path | str) -> dict[str, Any]:
    """Parse a YAML (or JSON, which is YAML) catalog file."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise CatalogDocumentError(f"{path}: the document must be a mapping")
    return data


def _usd_nanos(value: Any, where: str) -> int:
    if isinstance(value, bool | float):
        raise CatalogDocumentError(
            f"{where}: write prices as quoted decimal strings, not {value!r}"
        )
    try:
        return usd_to_nanos(Decimal(str(value)))
    except (InvalidOperation, ValueError) as exc:
        raise CatalogDocumentError(f"{where}: {exc}") from None


def _price_nanos(price: Mapping[str, Any], usd: UsdPrice, where: str) -> int | None:
    """The nano-USD of the flat price ``usd`` in the document entry ``price``: 0 when absent,
    ``None`` (the catalog's default) when an optional price is absent or null."""
    value = price.get(usd.name)
    if value is None:
        return None if usd.optional else 0
    return _usd_nanos(value, f"{where}.{usd.name}")


def _moment(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime.combine(value, time.min)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise CatalogDocumentError(f"{where}: not an ISO date/time: {value!r}") from None
    else:
        raise CatalogDocumentError(f"{where}: expected a date/time, got {value!r}")
    return moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)


def _fields(model: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in model._meta.get_fields()}
    return {k: v for k, v in values.items() if k in names}


def _cell(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"support": value}
    if not isinstance(value, dict) or value.get("support") not in (
        "honoured",
        "no_effect",
        "fails",
    ):
        raise CatalogDocumentError(f"{where}: support must be honoured, no_effect or fails")
    limit = value.get("max_value")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise CatalogDocumentError(f"{where}: max_value must be a non-negative integer")
    return {
        "support": value["support"],
        "accepted_values": list(value.get("accepted_values") or []),
        "max_value": limit,
        "note": str(value.get("note") or ""),
    }


def catalog_load(document: Mapping[str, Any], *, apps: Apps | None = None) -> LoadResult:
    """Upsert everything in ``document`` in one transaction (see the module doc).

    Raises :class:`CatalogDocumentError` (and writes nothing) for an invalid document.
    """
    registry = apps or django_apps
    vendor_model = registry.get_model("catalog", "Vendor")
    model_model = registry.get_model("catalog", "Model")
    offering_model = registry.get_model("catalog", "Offering")
    price_model = registry.get_model("catalog", "Price")
    rule_model = registry.get_model("catalog", "ParameterRule")
    counts = {"vendors": 0, "models": 0, "offerings": 0, "prices": 0, "rules": 0}
    with transaction.atomic():
        vendors: dict[str, Any] = {}
        for i, item in enumerate(document.get("vendors") or []):
            where = f"vendors[{i}]"
            if not isinstance(item, dict) or not item.get("name"):
                raise CatalogDocumentError(f"{where}: a vendor needs a name")
            values = {k: item[k] for k in VENDOR_FIELDS if k in item and item[k] is not None}
            problems = validation.vendor_rules_problems(values.get("parameter_rules", {}))
            if problems:
                raise CatalogDocumentError(f"{where}.parameter_rules: {'; '.join(problems)}")
            vendor, _ = vendor_model.objects.update_or_create(
                name=item["name"], defaults=_fields(vendor_model, values)
            )
            if "verified_models" in item:
                vendor.verified_models = sorted(str(m) for m in item["verified_models"] or [])
                vendor.verified_at = timezone.now()
                vendor.last_probe_error = ""
                vendor.save(update_fields=["verified_models", "verified_at", "last_probe_error"])
            vendors[vendor.name] = vendor
            counts["vendors"] += 1
        for i, item in enumerate(document.get("models") or []):
            where = f"models[{i}]"
            if not isinstance(item, dict) or not item.get("id"):
                raise CatalogDocumentError(f"{where}: a model needs an id")
            values = {k: item[k] for k in MODEL_FIELDS if k in item}
            if "created" in item:
                values["created_at"] = _moment(item["created"], f"{where}.created")
            if not values.get("owned_by"):
                raise CatalogDocumentError(f"{where}: owned_by is required")
            model, _ = model_model.objects.update_or_create(
                model_id=item["id"], defaults=_fields(model_model, values)
            )
            counts["models"] += 1
            for parameter, cell in (item.get("parameters") or {}).items():
                rule_model.objects.update_or_create(
                    model=model,
                    parameter=parameter,
                    defaults=_fields(rule_model, _cell(cell, f"{where}.parameters.{parameter}")),
                )
                counts["rules"] += 1
            for j, spec in enumerate(item.get("offerings") or []):
                counts["prices"] += _load_offering(
                    spec,
                    where=f"{where}.offerings[{j}]",
                    model=model,
                    vendors=vendors,
                    vendor_model=vendor_model,
                    offering_model=offering_model,
                    price_model=price_model,
                )
                counts["offerings"] += 1
        for i, spec in enumerate(document.get("offerings") or []):
            where = f"offerings[{i}]"
            model_id = spec.get("model") if isinstance(spec, dict) else None
            served = model_model.objects.filter(model_id=model_id).first() if model_id else None
            if served is None:
                raise CatalogDocumentError(f"{where}: unknown model {model_id!r}")
            counts["prices"] += _load_offering(
                spec,
                where=where,
                model=served,
                vendors=vendors,
                vendor_model=vendor_model,
                offering_model=offering_model,
                price_model=price_model,
            )
            counts["offerings"] += 1
        _bump_version()
    return LoadResult(**counts)


def _load_offering(
    spec: Any,
    *,
    where: str,
    model: Any,
    vendors: dict[str, Any],
    vendor_model: Any,
    offering_model: Any,
    price_model: Any,
) -> int:
    if not isinstance(spec, dict) or not spec.get("vendor"):
        raise CatalogDocumentError(f"{where}: an offering needs a vendor")
    vendor = vendors.get(spec["vendor"]) or vendor_model.objects.filter(name=spec["vendor"]).first()
    if vendor is None:
        raise CatalogDocumentError(f"{where}: unknown vendor {spec['vendor']!r}")
    values = {
        "upstream_model": spec.get("upstream_model") or model.model_id,
        "priority": int(spec.get("priority", 100)),
        "enabled": bool(spec.get("enabled", True)),
    }
    if spec.get("batch_discount_percent") is not None:
        values["batch_discount_percent"] = _percent(spec["batch_discount_percent"], where)
    offering, _ = offering_model.objects.update_or_create(
        vendor=vendor, model=model, defaults=_fields(offering_model, values)
    )
    loaded = 0
    for k, price in enumerate(spec.get("prices") or []):
        at = f"{where}.prices[{k}]"
        if not isinstance(price, dict) or "effective_from" not in price:
            raise CatalogDocumentError(f"{at}: a price needs effective_from")
        if not price.get("source"):
            raise CatalogDocumentError(f"{at}: a price needs a source note")
        amounts: dict[str, Any] = {p.column: _price_nanos(price, p, at) for p in USD_PRICES}
        amounts["per_image_nanos"] = {
            str(size): _usd_nanos(usd, f"{at}.per_image_usd.{size}")
            for size, usd in (price.get("per_image_usd") or {}).items()
        }
        amounts["source"] = str(price["source"])
        price_model.objects.update_or_create(
            offering=offering,
            effective_from=_moment(price["effective_from"], f"{at}.effective_from"),
            defaults=_fields(price_model, amounts),
        )
        loaded += 1
    return loaded


def _percent(value: Any, where: str) -> int:
    """``batch_discount_percent`` as the integer 0-100 it must be."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise CatalogDocumentError(
            f"{where}.batch_discount_percent: an integer from 0 to 100, not {value!r}"
        )
    return value


def _bump_version() -> None:
    from catalog.services import catalog_changed

    catalog_changed()


def catalog_dump() -> dict[str, Any]:
    """The whole catalog as a document :func:`catalog_load` reads back to the same catalog."""
    vendors = [
        {"name": v.name, **{k: getattr(v, k) for k in VENDOR_FIELDS}}
        for v in Vendor.objects.order_by("name")
    ]
    rules: dict[int, dict[str, Any]] = {}
    for rule in ParameterRule.objects.order_by("parameter"):
        cell: dict[str, Any] = {"support": rule.support}
        if rule.accepted_values:
            cell["accepted_values"] = list(rule.accepted_values)
        if rule.max_value is not None:
            cell["max_value"] = rule.max_value
        if rule.note:
            cell["note"] = rule.note
        rules.setdefault(rule.model_id, {})[rule.parameter] = (
            cell["support"] if len(cell) == 1 else cell
        )
    prices: dict[int, list[dict[str, Any]]] = {}
    for price in Price.objects.order_by("effective_from", "pk"):
        prices.setdefault(price.offering_id, []).append(_price_entry(price))
    offerings: dict[int, list[dict[str, Any]]] = {}
    for offering in Offering.objects.select_related("vendor").order_by("priority", "vendor__name"):
        offerings.setdefault(offering.model_id, []).append(
            {
                "vendor": offering.vendor.name,
                "upstream_model": offering.upstream_model,
                "priority": offering.priority,
                "enabled": offering.enabled,
                "batch_discount_percent": offering.batch_discount_percent,
                "prices": prices.get(offering.pk, []),
            }
        )
    models = [
        {
            "id": m.model_id,
            **{k: getattr(m, k) for k in MODEL_FIELDS},
            "created": m.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "parameters": rules.get(m.pk, {}),
            "offerings": offerings.get(m.pk, []),
        }
        for m in Model.objects.order_by("model_id")
    ]
    return {"vendors": vendors, "models": models}


def _price_entry(price: Price) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "effective_from": price.effective_from.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "source": price.source,
    }
    for p in USD_PRICES:
        nanos = getattr(price, p.column)
        if nanos or (p.optional and nanos is not None):
            entry[p.name] = nanos_to_usd_str(nanos)
    if price.per_image_nanos:
        entry["per_image_usd"] = price.per_image_usd()
    return entry


def dump_yaml(document: Mapping[str, Any]) -> str:
    """``document`` as block-style YAML in document order."""
    return yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True, width=100)
