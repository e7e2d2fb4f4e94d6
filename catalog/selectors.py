"""Reads of the catalog.

The ``/v1`` hot path never queries the catalog tables per call: :func:`catalog_snapshot` keeps
an immutable :class:`~catalog.types.CatalogSnapshot` per process and rebuilds it when the
catalog version in the shared cache changes (every write through :mod:`catalog.services`, the
admin and ``catalog load`` bump it). The version is checked at most every
``INFRAI_CATALOG_CHECK_S`` seconds (default 1) and a snapshot is rebuilt anyway after
``INFRAI_CATALOG_MAX_AGE_S`` (default 60) so credentials set in the environment are noticed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from catalog import health, validation
from catalog.models import Model, Offering, ParameterRule, Price, Vendor
from catalog.routing import RoutingDecision, RoutingRequest, decide_route
from catalog.types import (
    CatalogSnapshot,
    ModelView,
    OfferingView,
    ParamRule,
    Support,
    VendorView,
)
from infra import fastcache
from infra.db import db_async
from money.pricing import PriceSnapshot

log = logging.getLogger(__name__)

VERSION_KEY = "catalog:version"
#: The version never expires (``None`` to :mod:`infra.fastcache`): it changes only when
#: :func:`catalog.services.catalog_changed` replaces it.
VERSION_TTL_S = None


def credentials_configured(env_name: str) -> bool:
    """Whether the vendor secret named ``env_name`` is set (``INFRAI_VENDOR_SECRETS``).

    An empty name means the vendor needs no credentials.
    """
    return not env_name or bool(credentials_value(env_name))


def credentials_value(env_name: str) -> str:
    """The secret named ``env_name`` at call time ('' when none is needed or it is unset)."""
    if not env_name:
        return ""
    return str(settings.INFRAI_VENDOR_SECRETS.get(env_name) or "")


def vendor_base_url(vendor: Vendor) -> str:
    """``vendor.base_url``, or the value of the setting named by ``base_url_setting``."""
    if vendor.base_url_setting:
        override = getattr(settings, vendor.base_url_setting, None)
        if override:
            return str(override).rstrip("/")
    return vendor.base_url.rstrip("/")


def vendor_parameter_rules(stored: Any) -> dict[str, ParamRule]:
    """A vendor's ``parameter_rules`` column as ``{parameter: rule}`` (``support`` and, when
    given, ``accepted_values``; the ``source`` and ``note`` are for people). A column that
    :func:`catalog.validation.vendor_rules_problems` refuses never gets here:
    :func:`build_snapshot` leaves such a vendor out."""
    rules: dict[str, ParamRule] = {}
    for parameter, cell in stored.items() if isinstance(stored, dict) else ():
        if not isinstance(cell, dict) or cell.get("support") not in Support.values:
            continue
        accepted = cell.get("accepted_values") or ()
        rules[str(parameter)] = ParamRule(
            str(parameter),
            Support(cell["support"]),
            tuple(accepted) if isinstance(accepted, list) else (),
        )
    return rules


#: The defaults of a price row's empty cache-write prices, as (numerator, denominator) of its
#: input price: Anthropic's list ratios (a 5-minute write 1.25×, a 1-hour write 2× the input).
CACHE_WRITE_5M_OF_INPUT = (5, 4)
CACHE_WRITE_1H_OF_INPUT = (2, 1)


def _of_input(input_nanos: int, ratio: tuple[int, int]) -> int:
    """``ratio`` of ``input_nanos``, rounded up to a whole nano-USD per 1M tokens."""
    numerator, denominator = ratio
    return -(-input_nanos * numerator // denominator)


def price_snapshot(price: Price) -> PriceSnapshot:
    """The value type of one price row, with the catalog's defaults for its empty prices — the
    one place they are decided: a cache write at :data:`CACHE_WRITE_5M_OF_INPUT` /
    :data:`CACHE_WRITE_1H_OF_INPUT` of the input price, reasoning at the output price."""
    write_5m, write_1h = price.cache_write_5m_per_mtok_nanos, price.cache_write_1h_per_mtok_nanos
    reasoning = price.reasoning_per_mtok_nanos
    return PriceSnapshot(
        price_id=price.pk,
        input_per_mtok_nanos=price.input_per_mtok_nanos,
        cached_input_per_mtok_nanos=price.cached_input_per_mtok_nanos,
        cache_write_5m_per_mtok_nanos=(
            _of_input(price.input_per_mtok_nanos, CACHE_WRITE_5M_OF_INPUT)
            if write_5m is None
            else write_5m
        ),
        cache_write_1h_per_mtok_nanos=(
            _of_input(price.input_per_mtok_nanos, CACHE_WRITE_1H_OF_INPUT)
            if write_1h is None
            else write_1h
        ),
        output_per_mtok_nanos=price.output_per_mtok_nanos,
        reasoning_per_mtok_nanos=price.output_per_mtok_nanos if reasoning is None else reasoning,
        per_image_nanos={str(k): int(v) for k, v in (price.per_image_nanos or {}).items()},
        per_mchar_nanos=price.per_mchar_nanos,
        per_audio_second_nanos=price.per_audio_second_nanos,
    )


def price_in_force(*, offering_id: int, at: datetime) -> PriceSnapshot | None:
    """The price of ``offering_id`` in force at ``at`` (latest ``effective_from`` ≤ ``at``)."""
    row = (
        Price.objects.filter(offering_id=offering_id, effective_from__lte=at)
        .order_by("-effective_from")
        .first()
    )
    return price_snapshot(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class _Unroutable:
    reason: str  # for customers: names the vendor, never an operator setting
    detail: str  # for staff (the admin): what to fix
    permanent: bool  # lasts until an operator acts


def _unroutable(offering: Offering, vendor: VendorView) -> _Unroutable | None:
    if not offering.enabled:
        return _Unroutable(
            f"vendor {vendor.name} does not offer this model now", "offering disabled", True
        )
    if not vendor.enabled:
        return _Unroutable(
            f"vendor {vendor.name} is not available", f"vendor {vendor.name} disabled", True
        )
    if not vendor.credentials_configured:
        return _Unroutable(
            f"vendor {vendor.name} is not available on this platform",
            f"vendor {vendor.name} credentials not configured (set {vendor.credentials_env})",
            True,
        )
    if vendor.verified_at is None:
        return _Unroutable(
            f"vendor {vendor.name} is not ready yet",
            f"vendor {vendor.name} not verified (no successful probe of its /models yet)",
            False,
        )
    if offering.upstream_model not in vendor.verified_models:
        return _Unroutable(
            f"vendor {vendor.name} does not serve this model now",
            f"vendor {vendor.name} does not list {offering.upstream_model} in its /models",
            True,  # a verified vendor's model list changes by a deployment, not in seconds
        )
    return None


def _vendor_view(vendor: Vendor) -> VendorView:
    return VendorView(
        name=vendor.name,
        adapter_kind=vendor.adapter_kind,
        base_url=vendor_base_url(vendor),
        credentials_env=vendor.credentials_env,
        credentials_configured=credentials_configured(vendor.credentials_env),
        region=vendor.region,
        api_version=vendor.api_version,
        parameter_rules=vendor_parameter_rules(vendor.parameter_rules),
        enabled=vendor.enabled,
        verified_models=frozenset(str(m) for m in vendor.verified_models or ()),
        verified_at=vendor.verified_at,
    )


def _model_view(model: Model, rules: list[ParameterRule]) -> ModelView:
    return ModelView(
        model_id=model.model_id,
        display_name=model.display_name or model.model_id,
        owned_by=model.owned_by,
        created=int(model.created_at.timestamp()),
        capabilities=frozenset(model.capabilities or ()),
        tasks=frozenset(model.tasks or ()),
        context_window=model.context_window,
        max_output_tokens=model.max_output_tokens,
        default_output_tokens=model.default_output_tokens,
        quality_tier=model.quality_tier,
        embedding_dimensions=model.embedding_dimensions,
        rules={
            r.parameter: ParamRule(
                r.parameter, Support(r.support), tuple(r.accepted_values or ()), r.max_value
            )
            for r in rules
            if r.support != Support.HONOURED or r.accepted_values or r.max_value is not None
        },
        tokenizer=model.tokenizer,
    )


def _rule_problems(rule: ParameterRule) -> list[str]:
    return validation.cell_problems(
        parameter=rule.parameter,
        support=rule.support,
        accepted_values=rule.accepted_values,
        max_value=rule.max_value,
    )


def _price_problems(price: Price) -> list[str]:
    amounts = (
        price.input_per_mtok_nanos,
        price.cached_input_per_mtok_nanos,
        price.cache_write_5m_per_mtok_nanos,
        price.cache_write_1h_per_mtok_nanos,
        price.output_per_mtok_nanos,
        price.reasoning_per_mtok_nanos,
        price.per_mchar_nanos,
        price.per_audio_second_nanos,
    )
    problems = validation.per_image_problems(price.per_image_nanos)
    if any(amount is not None and amount < 0 for amount in amounts):
        problems.append("a negative price")
    return problems


class _Skipped:
    """The rows :func:`build_snapshot` leaves out, with why (logged once per build)."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, row: str, problems: list[str]) -> None:
        self.problems.append(f"{row} left out of routing: {'; '.join(problems)}")


def build_snapshot(*, version: str = "") -> CatalogSnapshot:
    """Read the whole catalog into an immutable snapshot (four queries).

    A row that is invalid (:mod:`catalog.validation`: an unknown capability or matrix cell, a
    malformed price …) is left out — a model without its bad row's offerings, an offering
    without its bad price — and named in the snapshot's ``problems`` and the log, so one bad
    row written past the admin's checks cannot fail every ``/v1`` call. Leaving out a bad
    *cell* would route to a model whose limits are unknown, so its whole model is left out;
    likewise a vendor with a malformed ``parameter_rules`` cell (a refusal it could lose).
    """
    skipped = _Skipped()
    vendors: dict[str, VendorView] = {}
    for vendor_row in Vendor.objects.all():
        problems = validation.vendor_row_problems(
            adapter_kind=vendor_row.adapter_kind, parameter_rules=vendor_row.parameter_rules
        )
        if problems:
            skipped.add(f"vendor {vendor_row.name}", problems)
            continue
        vendors[vendor_row.name] = _vendor_view(vendor_row)
    rules_by_model: dict[int, list[ParameterRule]] = defaultdict(list)
    for rule in ParameterRule.objects.all():
        rules_by_model[rule.model_id].append(rule)
    models: dict[str, ModelView] = {}
    for model in Model.objects.all():
        problems = validation.model_row_problems(capabilities=model.capabilities, tasks=model.tasks)
        problems += [p for r in rules_by_model[model.pk] for p in _rule_problems(r)]
        if problems:
            skipped.add(f"model {model.model_id}", problems)
            continue
        models[model.model_id] = _model_view(model, rules_by_model[model.pk])
    prices_by_offering: dict[int, list[tuple[datetime, PriceSnapshot]]] = defaultdict(list)
    for price in Price.objects.order_by("offering_id", "effective_from"):
        problems = _price_problems(price)
        if problems:
            skipped.add(f"price #{price.pk} of offering #{price.offering_id}", problems)
            continue
        prices_by_offering[price.offering_id].append((price.effective_from, price_snapshot(price)))
    offerings = []
    for offering in Offering.objects.select_related("vendor", "model").order_by(
        "model__model_id", "priority", "vendor__name"
    ):
        vendor = vendors.get(offering.vendor.name)
        if vendor is None or offering.model.model_id not in models:
            continue  # its vendor or model was left out (and reported) above
        unroutable = _unroutable(offering, vendor)
        offerings.append(
            OfferingView(
                offering_id=offering.pk,
                model_id=offering.model.model_id,
                vendor=vendor.name,
                adapter_kind=vendor.adapter_kind,
                base_url=vendor.base_url,
                credentials_env=vendor.credentials_env,
                region=vendor.region,
                api_version=vendor.api_version,
                upstream_model=offering.upstream_model,
                priority=offering.priority,
                prices=tuple(prices_by_offering[offering.pk]),
                unroutable_reason=unroutable.reason if unroutable else None,
                unroutable_detail=unroutable.detail if unroutable else "",
                unroutable_permanent=unroutable.permanent if unroutable else False,
                vendor_rules=vendor.parameter_rules,
            )
        )
    for problem in skipped.problems:
        log.error("catalog: %s", problem)
    return CatalogSnapshot(
        version=version,
        built_at=timezone.now(),
        vendors=vendors,
        models=models,
        offerings=tuple(offerings),
        problems=tuple(skipped.problems),
    )


@dataclass(frozen=True, slots=True)
class _Held:
    snapshot: CatalogSnapshot
    checked_at: float  # time.monotonic()
    built_at: float


_held: _Held | None = None


def catalog_snapshot_forget() -> None:
    """Drop this process's snapshot; the next :func:`catalog_snapshot` rebuilds it."""
    global _held
    _held = None


def _check_interval_s() -> float:
    return float(settings.INFRAI_CATALOG_CHECK_S)


def _max_age_s() -> float:
    return float(settings.INFRAI_CATALOG_MAX_AGE_S)


def catalog_version() -> str:
    """The catalog version in the shared cache (created when the cache has none)."""
    version = fastcache.get_sync(VERSION_KEY)
    if version is None:
        fastcache.add_sync(VERSION_KEY, uuid.uuid4().hex, VERSION_TTL_S)
        version = fastcache.get_sync(VERSION_KEY)
    return str(version)


async def _acatalog_version() -> str:
    version = await fastcache.get(VERSION_KEY)
    if version is None:
        await fastcache.add(VERSION_KEY, uuid.uuid4().hex, VERSION_TTL_S)
        version = await fastcache.get(VERSION_KEY)
    return str(version)


_build_snapshot_async = db_async(build_snapshot)


async def catalog_snapshot() -> CatalogSnapshot:
    """This process's catalog snapshot, current within ``INFRAI_CATALOG_CHECK_S`` seconds.

    Costs nothing most calls, one cache GET once a second, four queries after a change.
    """
    global _held
    held = _held
    now = time.monotonic()
    if held is not None and now - held.checked_at < _check_interval_s():
        return held.snapshot
    version = await _acatalog_version()
    if held is not None and held.snapshot.version == version and now - held.built_at < _max_age_s():
        _held = _Held(held.snapshot, now, held.built_at)
        return held.snapshot
    snapshot = await _build_snapshot_async(version=version)
    built = time.monotonic()
    _held = _Held(snapshot, built, built)
    return snapshot


def catalog_snapshot_sync() -> CatalogSnapshot:
    """A freshly built snapshot, for sync callers (admin, commands, tests)."""
    return build_snapshot(version=catalog_version())


async def routing_decide(
    *, request: RoutingRequest, now: datetime | None = None
) -> RoutingDecision:
    """The routing decision for ``request`` over the current snapshot and vendor health.

    The one call the ``/v1`` handlers make; raises the refusals of
    :func:`catalog.routing.decide_route`.
    """
    snapshot = await catalog_snapshot()
    vendor_health = await health.ahealth_of(snapshot.vendors)
    return decide_route(
        snapshot=snapshot, request=request, health=vendor_health, now=now or timezone.now()
    )


def routable_offerings(snapshot: CatalogSnapshot, model_id: str) -> tuple[OfferingView, ...]:
    """The offerings of ``model_id`` that can be routed to (circuit state aside)."""
    return tuple(o for o in snapshot.offerings_of(model_id) if o.routable)


def capability_coverage(snapshot: CatalogSnapshot, *, at: datetime) -> dict[str, frozenset[str]]:
    """For every capability a model of ``snapshot`` lists, the ids of the models that can
    serve it at ``at``: a routable offering (:func:`routable_offerings`) with a price in force
    (:func:`prices_in_force`) — routing's own two rules, circuit state aside. A capability no
    model can serve maps to an empty set (every call that needs it is refused)."""
    coverage: dict[str, set[str]] = {}
    for model in snapshot.models.values():
        served = bool(prices_in_force(routable_offerings(snapshot, model.model_id), at=at))
        for capability in model.capabilities:
            models = coverage.setdefault(capability, set())
            if served:
                models.add(model.model_id)
    return {capability: frozenset(ids) for capability, ids in coverage.items()}


def listed_models(snapshot: CatalogSnapshot) -> list[ModelView]:
    """The models at least one routable offering serves, by id (what ``/v1/models`` lists)."""
    return [
        m
        for m in sorted(snapshot.models.values(), key=lambda m: m.model_id)
        if routable_offerings(snapshot, m.model_id)
    ]


def models_matching(
    snapshot: CatalogSnapshot,
    *,
    capability: str | None = None,
    vendor: str | None = None,
    task: str | None = None,
) -> list[ModelView]:
    """Every catalog model (available or not) with the capability / vendor / task, by id."""
    out = []
    for model in sorted(snapshot.models.values(), key=lambda m: m.model_id):
        if capability and capability not in model.capabilities:
            continue
        if task and task not in model.tasks:
            continue
        if vendor and not any(o.vendor == vendor for o in snapshot.offerings_of(model.model_id)):
            continue
        out.append(model)
    return out


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A listed model and its lowest prices in force (``None`` when no routable offering has a
    price in force): nano-USD per 1M input / output tokens, per 1M characters of speech, per
    second of audio, and the cheapest and dearest image (each size/quality at its lowest
    vendor price; ``None`` for a model without image prices)."""

    model_id: str
    vendors: tuple[str, ...]
    capabilities: tuple[str, ...]
    context_window: int
    input_per_mtok_nanos: int | None
    output_per_mtok_nanos: int | None
    per_mchar_nanos: int | None = None
    per_audio_second_nanos: int | None = None
    per_image_range_nanos: tuple[int, int] | None = None


def prices_in_force(offerings: tuple[OfferingView, ...], *, at: datetime) -> list[PriceSnapshot]:
    """The price each of ``offerings`` charges at ``at`` — the one rule routing prices its
    candidates by (:meth:`OfferingView.price_at`: the latest row whose ``effective_from`` ≤
    ``at``); offerings without a price in force are left out."""
    return [p for p in (o.price_at(at) for o in offerings) if p is not None]


def model_prices(*, at: datetime, snapshot: CatalogSnapshot | None = None) -> list[ModelPrice]:
    """Every listed model with the lowest input / output price in force at ``at`` among its
    routable offerings (what the dashboard's model lists show). A price row dated after ``at``
    is not shown yet, exactly as routing does not charge it yet."""
    snapshot = snapshot or catalog_snapshot_sync()
    out: list[ModelPrice] = []
    for model in listed_models(snapshot):
        offerings = routable_offerings(snapshot, model.model_id)
        prices = prices_in_force(offerings, at=at)
        out.append(
            ModelPrice(
                model_id=model.model_id,
                vendors=tuple(sorted({o.vendor for o in offerings})),
                capabilities=tuple(sorted(model.capabilities)),
                context_window=model.context_window,
                input_per_mtok_nanos=min((p.input_per_mtok_nanos for p in prices), default=None),
                output_per_mtok_nanos=min((p.output_per_mtok_nanos for p in prices), default=None),
                per_mchar_nanos=min((p.per_mchar_nanos for p in prices), default=None),
                per_audio_second_nanos=min(
                    (p.per_audio_second_nanos for p in prices), default=None
                ),
                per_image_range_nanos=_image_price_range(prices),
            )
        )
    return out


def _image_price_range(prices: list[PriceSnapshot]) -> tuple[int, int] | None:
    """(cheapest, dearest) image among ``prices``, each size/quality at its lowest price."""
    lowest: dict[str, int] = {}
    for price in prices:
        for key, nanos in price.per_image_nanos.items():
            lowest[key] = min(int(nanos), lowest.get(key, int(nanos)))
    return (min(lowest.values()), max(lowest.values())) if lowest else None


def batch_discount_percents(*, offering_ids: Iterable[int]) -> dict[int, int]:
    """The Batch API's discount (percent, 0-100) of each of ``offering_ids`` that exists
    (``Offering.batch_discount_percent``, edited by staff in the admin)."""
    return dict(
        Offering.objects.filter(pk__in=list(offering_ids)).values_list(
            "pk", "batch_discount_percent"
        )
    )
