"""The routing decision: which offerings to try for one request, in which order, and why.

:func:`decide_route` is pure — an immutable :class:`~catalog.types.CatalogSnapshot`, the
request's needs, vendor health and the clock in; a :class:`RoutingDecision` or a typed refusal
out. No database, no cache, no I/O: the hot path gets the snapshot and health once per call from
:func:`catalog.selectors.routing_decide` (which then calls this).

Modes (the ``model`` field): ``auto`` (= ``prefer`` from ``extra_body``, default ``balanced``),
``cheapest``, ``smartest``; anything else pins a model (``gpt-4o-mini``) or a vendor and model
(``dashscope/qwen-plus``). Ordering rules, per ``prefer``:

- ``cheapest``: lowest expected cost (``billing.pricing.cost_nanos`` of the expected usage at
  the price in force), then higher quality, priority, model id, vendor name.
- ``smartest``: highest quality tier, then lowest cost, priority, model id, vendor name.
- ``fastest``: lowest recent latency (unknown last), then lowest cost, higher quality, ids.
- ``balanced``: highest score in basis points = 5000 × tier / 10 + 3500 × (cheapest cost among
  the eligible / this cost) + 1500 × (fastest latency among the eligible / this latency; 750 when
  unknown); ties by lower cost, higher quality, model id, vendor name.

In every mode offerings on a half-open circuit (one trial request allowed) come after all the
others, and offerings on an open circuit are left out. A routing mode never chooses a model on
which a parameter the request sets *fails*; a pinned model answers 400 instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from billing.money import nanos_to_usd_str
from billing.pricing import Usage, cost_nanos
from catalog.types import (
    CatalogSnapshot,
    CircuitState,
    ModelView,
    OfferingView,
    ParamRule,
    PriceSnapshot,
    Support,
    VendorHealth,
)
from config.errors import InvalidRequest, NoRoutableOffering, NotFound

ROUTING_MODES = ("auto", "cheapest", "smartest")
PREFERENCES = ("balanced", "cheapest", "smartest", "fastest")

# The request field a missing capability is blamed on in a 400.
_CAPABILITY_PARAM = {
    "vision": "messages",
    "tools": "tools",
    "json_mode": "response_format",
}

# Used for cost ranking when the caller passes no expected usage.
_REFERENCE_USAGE = {
    "images": Usage(images={"1024x1024/standard": 1}),
    "speech": Usage(characters=1000),
    "transcription": Usage(audio_ms=60_000),
    "embeddings": Usage(input_tokens=1000),
    "moderation": Usage(input_tokens=1000),
}
_REFERENCE_CHAT_USAGE = Usage(input_tokens=1000, output_tokens=500)

_MAX_ALTERNATIVES = 5
_MAX_EXCLUDED = 10


@dataclass(frozen=True, slots=True)
class RoutingRequest:
    """What routing needs to know about one request.

    ``capabilities``: what the request needs (``chat``; ``vision`` when an image part is
    present; ``tools`` when tools are sent; ``json_mode`` for a JSON ``response_format`` …).
    ``params``: the matrix parameters the request sets explicitly, with their values
    (``{"seed": 7, "repetition_penalty": 1.1}``; ``extra_body`` ones included; unset ones absent).
    ``task`` / ``prefer``: from ``extra_body``. ``expected_usage``: what the call will probably
    consume (for cost ranking); ``None`` uses a reference usage for the capability.
    """

    model: str = "auto"
    capabilities: frozenset[str] = frozenset({"chat"})
    params: Mapping[str, Any] = field(default_factory=dict)
    task: str | None = None
    prefer: str | None = None
    expected_usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One offering to try, with everything the caller needs to call and bill it.

    ``ignored_params``: the request's parameters that have *no effect* on this model (the
    response reports them). ``rules``: the model's non-default matrix cells. ``health``: when
    ``HALF_OPEN`` the caller must win :func:`catalog.health.allow_request_async` before calling.
    """

    offering_id: int
    vendor: str
    adapter_kind: str
    base_url: str
    credentials_env: str
    region: str
    upstream_model: str
    model: str
    price: PriceSnapshot
    rules: Mapping[str, ParamRule]
    ignored_params: tuple[str, ...]
    health: CircuitState
    expected_cost_nanos: int
    quality_tier: int
    score: int

    @property
    def label(self) -> str:
        """``vendor/model``, as pins are written."""
        return f"{self.vendor}/{self.model}"


@dataclass(frozen=True, slots=True)
class Exclusion:
    """An offering (``vendor/model``) or model left out, and why."""

    label: str
    reason: str


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    """The ordered candidates (never empty) and the reason for the order.

    ``mode``: ``auto`` / ``cheapest`` / ``smartest`` / ``pinned``; ``prefer``: the ordering used
    (``None`` for a pin).
    """

    mode: str
    prefer: str | None
    task: str | None
    why: str
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...] = ()

    @property
    def first(self) -> Candidate:
        return self.candidates[0]

    def reason(self, *, chosen: Candidate | None = None) -> dict[str, Any]:
        """The ``infrai.routing`` object: mode, chosen offering, why, alternatives considered.

        ``chosen`` defaults to the first candidate; pass the one that served after failover.
        """
        served = chosen or self.first
        return {
            "mode": self.mode,
            "prefer": self.prefer,
            "task": self.task,
            "chosen": served.label,
            "why": self.why,
            "alternatives": [
                {
                    "model": c.model,
                    "vendor": c.vendor,
                    "expected_cost_usd": nanos_to_usd_str(c.expected_cost_nanos),
                    "quality_tier": c.quality_tier,
                }
                for c in self.candidates
                if c.offering_id != served.offering_id
            ][:_MAX_ALTERNATIVES],
            "excluded": [
                {"offering": e.label, "reason": e.reason} for e in self.excluded[:_MAX_EXCLUDED]
            ],
        }


def decide_route(
    *,
    snapshot: CatalogSnapshot,
    request: RoutingRequest,
    health: Mapping[str, VendorHealth],
    now: datetime,
) -> RoutingDecision:
    """The offerings to try for ``request``, best first.

    Raises :class:`~config.errors.NotFound` (``model_not_found``, param ``model``) for an
    unknown model or vendor pin; :class:`~config.errors.InvalidRequest` when a pinned model
    lacks a capability (``unsupported_capability``) or a parameter fails on it
    (``unsupported_parameter``, or ``invalid_value`` when only some values are accepted; param
    = the parameter), or for an unknown ``prefer`` / ``task``;
    :class:`~config.errors.NoRoutableOffering` (503) when nothing can serve it now.
    """
    name = request.model.strip() or "auto"
    usage = request.expected_usage or _reference_usage(request.capabilities)
    if name in ROUTING_MODES:
        return _route_mode(
            snapshot=snapshot, request=request, mode=name, health=health, now=now, usage=usage
        )
    return _route_pinned(
        snapshot=snapshot, request=request, name=name, health=health, now=now, usage=usage
    )


def _reference_usage(capabilities: frozenset[str]) -> Usage:
    for capability, usage in _REFERENCE_USAGE.items():
        if capability in capabilities:
            return usage
    return _REFERENCE_CHAT_USAGE


def parameter_effects(model: ModelView, params: Mapping[str, Any]) -> dict[str, Support]:
    """What ``model`` does with each parameter in ``params`` (absent matrix cell: honoured)."""
    return {p: model.rule(p).effect(v) for p, v in sorted(params.items())}


def _failing(model: ModelView, params: Mapping[str, Any]) -> list[str]:
    return [p for p, s in parameter_effects(model, params).items() if s is Support.FAILS]


def _ignored(model: ModelView, params: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(p for p, s in parameter_effects(model, params).items() if s is Support.NO_EFFECT)


def _parameter_refusal(model: ModelView, parameter: str, value: Any) -> InvalidRequest:
    rule = model.rule(parameter)
    if rule.accepted_values:
        accepted = " or ".join(repr(v) for v in rule.accepted_values)
        hint = (
            " Use 'repetition_penalty' to penalize repetition."
            if parameter in ("presence_penalty", "frequency_penalty")
            else ""
        )
        return InvalidRequest(
            f"Invalid value for '{parameter}': {value!r}. Model '{model.model_id}' does not "
            f"implement '{parameter}', so only {accepted} is accepted.{hint}",
            code="invalid_value",
            param=parameter,
        )
    return InvalidRequest(
        f"Model '{model.model_id}' does not support the parameter '{parameter}'; remove it or "
        f"choose another model.",
        code="unsupported_parameter",
        param=parameter,
    )


def _unknown_model(name: str) -> NotFound:
    return NotFound(
        f"The model '{name}' does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def resolve_model_name(snapshot: CatalogSnapshot, name: str) -> tuple[ModelView, str | None] | None:
    """``(model, pinned vendor or None)`` for a model id or ``vendor/model``, else ``None``.

    An exact model id wins over a ``vendor/model`` reading (model ids may contain ``/``);
    model ids are matched case-insensitively as a last resort.
    """
    exact = snapshot.models.get(name)
    if exact is not None:
        return exact, None
    vendor, sep, rest = name.partition("/")
    if sep and vendor in snapshot.vendors:
        model = snapshot.find_model(rest)
        return (model, vendor) if model is not None else None
    model = snapshot.find_model(name)
    return (model, None) if model is not None else None


@dataclass(frozen=True, slots=True)
class _Eligible:
    model: ModelView
    offering: OfferingView
    price: PriceSnapshot
    health: VendorHealth
    cost_nanos: int


def _availability(
    offering: OfferingView, health: Mapping[str, VendorHealth], now: datetime, usage: Usage
) -> tuple[PriceSnapshot, VendorHealth, int] | str:
    """Price, health and expected cost of a usable offering, or why it is not usable."""
    if offering.unroutable_reason is not None:
        return offering.unroutable_reason
    vendor_health = health.get(offering.vendor, VendorHealth())
    if vendor_health.state is CircuitState.OPEN:
        return f"vendor {offering.vendor} is failing (circuit open)"
    price = offering.price_at(now)
    if price is None:
        return "no price in force"
    return price, vendor_health, cost_nanos(price=price, usage=usage)


def _candidate(item: _Eligible, params: Mapping[str, Any], score: int) -> Candidate:
    offering = item.offering
    return Candidate(
        offering_id=offering.offering_id,
        vendor=offering.vendor,
        adapter_kind=offering.adapter_kind,
        base_url=offering.base_url,
        credentials_env=offering.credentials_env,
        region=offering.region,
        upstream_model=offering.upstream_model,
        model=item.model.model_id,
        price=item.price,
        rules=item.model.rules,
        ignored_params=_ignored(item.model, params),
        health=item.health.state,
        expected_cost_nanos=item.cost_nanos,
        quality_tier=item.model.quality_tier,
        score=score,
    )


def _route_pinned(
    *,
    snapshot: CatalogSnapshot,
    request: RoutingRequest,
    name: str,
    health: Mapping[str, VendorHealth],
    now: datetime,
    usage: Usage,
) -> RoutingDecision:
    resolved = resolve_model_name(snapshot, name)
    if resolved is None:
        raise _unknown_model(name)
    model, vendor_pin = resolved
    for capability in sorted(request.capabilities - model.capabilities):
        raise InvalidRequest(
            f"Model '{model.model_id}' does not support {capability}; choose a model that "
            f"does, or use model 'auto'.",
            code="unsupported_capability",
            param=_CAPABILITY_PARAM.get(capability, "model"),
        )
    for parameter in _failing(model, request.params):
        raise _parameter_refusal(model, parameter, request.params[parameter])
    offerings = [o for o in snapshot.offerings_of(model.model_id) if vendor_pin in (None, o.vendor)]
    if vendor_pin is not None and not offerings:
        raise NotFound(
            f"Vendor '{vendor_pin}' does not serve the model '{model.model_id}'.",
            code="model_not_found",
            param="model",
        )
    eligible: list[_Eligible] = []
    excluded: list[Exclusion] = []
    for offering in offerings:
        found = _availability(offering, health, now, usage)
        if isinstance(found, str):
            excluded.append(Exclusion(f"{offering.vendor}/{model.model_id}", found))
        else:
            eligible.append(_Eligible(model, offering, *found))
    if not eligible:
        reasons = "; ".join(f"{e.label}: {e.reason}" for e in excluded) or "no offering"
        raise NoRoutableOffering(
            f"The model '{model.model_id}' cannot be served right now ({reasons}).",
            code="no_routable_offering",
        )
    eligible.sort(
        key=lambda e: (
            e.health.state is CircuitState.HALF_OPEN,
            e.offering.priority,
            e.cost_nanos,
            e.offering.vendor,
        )
    )
    pin = f"{vendor_pin}/{model.model_id}" if vendor_pin else model.model_id
    why = f"pinned to {pin}; offerings in priority order"
    if request.task:
        why += f" (task '{request.task}' does not apply to a pinned model)"
    return RoutingDecision(
        mode="pinned",
        prefer=None,
        task=request.task,
        why=why,
        candidates=tuple(_candidate(e, request.params, 0) for e in eligible),
        excluded=tuple(excluded),
    )


def _route_mode(
    *,
    snapshot: CatalogSnapshot,
    request: RoutingRequest,
    mode: str,
    health: Mapping[str, VendorHealth],
    now: datetime,
    usage: Usage,
) -> RoutingDecision:
    prefer = _preference(mode, request.prefer)
    task = request.task
    if task is not None:
        known = sorted({t for m in snapshot.models.values() for t in m.tasks})
        if task not in known:
            raise InvalidRequest(
                f"Unknown task '{task}'. Known tasks: {', '.join(known)}.",
                code="invalid_value",
                param="task",
            )
    eligible: list[_Eligible] = []
    excluded: list[Exclusion] = []
    capable = 0
    for model in sorted(snapshot.models.values(), key=lambda m: m.model_id):
        if not request.capabilities <= model.capabilities:
            continue
        if task is not None and task not in model.tasks:
            continue
        capable += 1
        failing = _failing(model, request.params)
        if failing:
            excluded.append(Exclusion(model.model_id, f"parameter {', '.join(failing)} fails"))
            continue
        for offering in snapshot.offerings_of(model.model_id):
            found = _availability(offering, health, now, usage)
            if isinstance(found, str):
                excluded.append(Exclusion(f"{offering.vendor}/{model.model_id}", found))
            else:
                eligible.append(_Eligible(model, offering, *found))
    needs = ", ".join(sorted(request.capabilities))
    if not eligible:
        detail = (
            f"{capable} model(s) offer {needs}"
            + (f" for task '{task}'" if task else "")
            + (", but none can serve this request now" if capable else "")
        )
        raise NoRoutableOffering(
            f"No model can serve this request right now: {detail}.",
            code="no_routable_offering",
        )
    scores = _balanced_scores(eligible) if prefer == "balanced" else {}
    eligible.sort(key=_ORDERINGS[prefer](scores))
    chosen = eligible[0]
    why = (
        f"{_WHY[prefer]}; chose {chosen.offering.vendor}/{chosen.model.model_id} "
        f"among {len(eligible)} eligible offering(s) offering {needs}"
        + (f" tagged '{task}'" if task else "")
    )
    return RoutingDecision(
        mode=mode,
        prefer=prefer,
        task=task,
        why=why,
        candidates=tuple(
            _candidate(e, request.params, scores.get(e.offering.offering_id, 0)) for e in eligible
        ),
        excluded=tuple(excluded),
    )


def _preference(mode: str, prefer: str | None) -> str:
    if mode != "auto":
        return mode
    chosen = prefer or "balanced"
    if chosen not in PREFERENCES:
        raise InvalidRequest(
            f"Invalid value for 'prefer': {chosen!r}. Use one of: {', '.join(PREFERENCES)}.",
            code="invalid_value",
            param="prefer",
        )
    return chosen


_WHY = {
    "cheapest": "cheapest: lowest expected cost",
    "smartest": "smartest: highest quality tier, then lowest expected cost",
    "fastest": "fastest: lowest recent latency, then lowest expected cost",
    "balanced": "auto (balanced): best blend of quality 50%, price 35%, latency 15%",
}

_UNKNOWN_LATENCY = 1 << 62

_SortKey = Callable[[_Eligible], tuple[Any, ...]]


def _tail(e: _Eligible) -> tuple[str, str]:
    return e.model.model_id, e.offering.vendor


def _half_open(e: _Eligible) -> bool:
    return e.health.state is CircuitState.HALF_OPEN


def _order_cheapest(scores: Mapping[int, int]) -> _SortKey:
    return lambda e: (
        _half_open(e),
        e.cost_nanos,
        -e.model.quality_tier,
        e.offering.priority,
        *_tail(e),
    )


def _order_smartest(scores: Mapping[int, int]) -> _SortKey:
    return lambda e: (
        _half_open(e),
        -e.model.quality_tier,
        e.cost_nanos,
        e.offering.priority,
        *_tail(e),
    )


def _order_fastest(scores: Mapping[int, int]) -> _SortKey:
    return lambda e: (
        _half_open(e),
        e.health.latency_ms if e.health.latency_ms is not None else _UNKNOWN_LATENCY,
        e.cost_nanos,
        -e.model.quality_tier,
        *_tail(e),
    )


def _order_balanced(scores: Mapping[int, int]) -> _SortKey:
    return lambda e: (
        _half_open(e),
        -scores[e.offering.offering_id],
        e.cost_nanos,
        -e.model.quality_tier,
        *_tail(e),
    )


_ORDERINGS: dict[str, Callable[[Mapping[int, int]], _SortKey]] = {
    "cheapest": _order_cheapest,
    "smartest": _order_smartest,
    "fastest": _order_fastest,
    "balanced": _order_balanced,
}


def _balanced_scores(eligible: list[_Eligible]) -> dict[int, int]:
    """The ``balanced`` score of each offering, integer basis points (see the module doc)."""
    costs = [e.cost_nanos for e in eligible if e.cost_nanos > 0]
    min_cost = min(costs) if costs else 0
    latencies = [e.health.latency_ms for e in eligible if e.health.latency_ms]
    min_latency = min(latencies) if latencies else 0
    scores: dict[int, int] = {}
    for e in eligible:
        quality = 5000 * min(e.model.quality_tier, 10) // 10
        price = 3500 if e.cost_nanos <= 0 else 3500 * min_cost // e.cost_nanos
        latency = 750 if not e.health.latency_ms else 1500 * min_latency // e.health.latency_ms
        scores[e.offering.offering_id] = quality + price + latency
    return scores
