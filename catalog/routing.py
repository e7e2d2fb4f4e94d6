"""The routing decision: which offerings to try for one request, in which order, and why.

:func:`decide_route` is pure — an immutable :class:`~catalog.types.CatalogSnapshot`, the
request's needs, vendor health and the clock in; a :class:`RoutingDecision` or a typed refusal
out. No database, no cache, no I/O: the hot path gets the snapshot and health once per call from
:func:`catalog.selectors.routing_decide` (which then calls this).

Modes (the ``model`` field): ``auto`` (= ``prefer`` from ``extra_body``, default ``balanced``),
``cheapest``, ``smartest``; anything else pins a model (``gpt-4o-mini``) or a vendor and model
(``dashscope/qwen-plus``). Ordering rules, per ``prefer``:

- ``cheapest``: lowest expected cost (``money.pricing.cost_nanos`` of the expected usage at
  the price in force), then higher quality, priority, model id, vendor name.
- ``smartest``: highest quality tier, then lowest cost, priority, model id, vendor name.
- ``fastest``: lowest recent latency (unknown last), then lowest cost, higher quality, ids.
- ``balanced``: highest score in basis points = 5000 × tier / 10 + 3500 × (cheapest cost among
  the eligible / this cost) + 1500 × (fastest latency among the eligible / this latency; 750 when
  unknown); ties by lower cost, higher quality, model id, vendor name.

In every mode offerings on a half-open circuit (one trial request allowed) come after all the
others, and offerings on an open circuit are left out.

A vendor's own parameter rules (``Vendor.parameter_rules``: what an OpenAI-compatible host
refuses or ignores whatever the model) apply per offering: a parameter the vendor *fails* makes
that vendor's offerings unusable for the request (the other vendors of the model serve it; a
pin to the vendor, or to a model only such vendors can serve now, answers 400 naming the
parameter), one it ignores is reported in that candidate's ``ignored_params``.

What the request needs is a filter, checked before anything is held: a feature (image input,
tools, JSON ``response_format``), every matrix parameter it sets (a parameter that *fails*,
or a value above the model's limit: ``n``, ``logit_bias`` token ids, ``dimensions``), and the
model's limits (prompt tokens + ``max_tokens`` within the context window, ``max_tokens`` within
the output limit). A pinned model that does not meet one answers 400 naming the parameter; a
routing mode leaves such models out and, when none is left among the models that could serve
the endpoint, answers 400 naming the parameter and listing the available models that meet it —
never a 503, which clients retry. A 503 means nothing can serve the endpoint at all right now;
it carries ``x-should-retry: false`` when waiting will not change that (see
:class:`~catalog.errors.NoRoute`).

Refusals are the catalog's own exceptions (:mod:`catalog.errors`: the message, the reason's
code, the request field); the web layer maps each to its OpenAI error
(:func:`inference.errors.api_error`), so "400", "404" and "503" above are how it answers them.

Model ids and routing modes are matched case-insensitively (``Auto``, ``gpt-4O-mini``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from catalog.errors import ModelNotFound, NoRoute, RoutingRefused
from catalog.types import (
    CatalogSnapshot,
    CircuitState,
    ModelView,
    OfferingAddress,
    OfferingView,
    ParamRule,
    Support,
    VendorHealth,
    largest,
)
from money.pricing import PriceSnapshot, Usage, cost_nanos
from money.usd import nanos_to_usd_str

ROUTING_MODES = ("auto", "cheapest", "smartest")
PREFERENCES = ("balanced", "cheapest", "smartest", "fastest")

# The request field a missing capability is blamed on in a 400; capabilities not listed here
# are the endpoint's own (chat, embeddings …) and choose which models are considered at all.
_CAPABILITY_PARAM = {
    "vision": "messages",
    "tools": "tools",
    "json_mode": "response_format",
    "min_p": "min_p",
    "guided_json": "guided_json",
    "guided_regex": "guided_regex",
    "guided_choice": "guided_choice",
    "guided_grammar": "guided_grammar",
}
_CAPABILITY_WORDS = {
    "vision": "image input",
    "tools": "tool calling",
    "json_mode": "JSON output (response_format json_object / json_schema)",
    "min_p": "'min_p' (a vLLM sampling field)",
    "guided_json": "'guided_json' (vLLM guided decoding)",
    "guided_regex": "'guided_regex' (vLLM guided decoding)",
    "guided_choice": "'guided_choice' (vLLM guided decoding)",
    "guided_grammar": "'guided_grammar' (vLLM guided decoding)",
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
    ``prompt_tokens``: the prompt's tokens (our count) — checked, with ``max_output_tokens``,
    against each model's context window; ``max_output_tokens``: the output cap the caller set
    (``None``: none), checked against each model's output limit and named ``max_output_param``
    in a refusal (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``).
    ``None`` leaves the check out.
    """

    model: str = "auto"
    capabilities: frozenset[str] = frozenset({"chat"})
    params: Mapping[str, Any] = field(default_factory=dict)
    task: str | None = None
    prefer: str | None = None
    expected_usage: Usage | None = None
    prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    max_output_param: str = "max_tokens"


@dataclass(frozen=True, slots=True)
class Candidate(OfferingAddress):
    """One offering to try (where it is served: :class:`~catalog.types.OfferingAddress`), with
    everything else the caller needs to call and bill it.

    ``ignored_params``: the request's parameters that have *no effect* on this model (the
    response reports them). ``rules``: the model's non-default matrix cells. ``health``: when
    ``HALF_OPEN`` the caller must win :func:`catalog.health.allow_request_async` before calling.
    ``context_window`` / ``max_output_tokens``: the model's limits in tokens (0: unknown), to
    size the output cap and the hold per candidate (:meth:`output_room`);
    ``default_output_tokens``: the cap a request that sets none gets (0: the vendor's own
    default, bounded only by those limits). ``tokenizer``: the
    tiktoken encoding the model reads token ids with (``""``: its own).
    """

    model: str
    price: PriceSnapshot
    rules: Mapping[str, ParamRule]
    ignored_params: tuple[str, ...]
    health: CircuitState
    expected_cost_nanos: int
    quality_tier: int
    score: int
    context_window: int = 0
    max_output_tokens: int = 0
    default_output_tokens: int = 0
    tokenizer: str = ""

    @property
    def label(self) -> str:
        """``vendor/model``, as pins are written."""
        return f"{self.vendor}/{self.model}"

    def output_room(self, prompt_tokens: int, requested: int | None = None) -> int | None:
        """The most output tokens this model can give a prompt of ``prompt_tokens``: the
        ``requested`` cap if any, else the model's default output limit, never above its output
        limit or what the context window leaves; ``None`` when the catalog knows none of them."""
        if requested is None and self.default_output_tokens:
            requested = self.default_output_tokens
        limits = []
        if self.max_output_tokens:
            limits.append(self.max_output_tokens)
        if self.context_window:
            limits.append(max(self.context_window - prompt_tokens, 1))
        if requested is not None:
            limits.append(requested)
        return min(limits) if limits else None


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

    Raises :class:`~catalog.errors.ModelNotFound` (``model_not_found``, param ``model``) for an
    unknown model or vendor pin; :class:`~catalog.errors.RoutingRefused` when a pinned model
    lacks a capability (``unsupported_capability``) or a parameter fails on it
    (``unsupported_parameter``, or ``invalid_value`` when only some values are accepted; param
    = the parameter), or for an unknown ``prefer`` / ``task``;
    :class:`~catalog.errors.NoRoute` when nothing can serve it now.
    """
    name = request.model.strip() or "auto"
    usage = request.expected_usage or _reference_usage(request.capabilities)
    mode = routing_mode(name)
    if mode is not None:
        return _route_mode(
            snapshot=snapshot, request=request, mode=mode, health=health, now=now, usage=usage
        )
    return _route_pinned(
        snapshot=snapshot, request=request, name=name, health=health, now=now, usage=usage
    )


def routing_mode(name: str) -> str | None:
    """The routing mode ``name`` spells (any case, ``Auto`` → ``auto``), else ``None``."""
    folded = name.strip().casefold()
    return folded if folded in ROUTING_MODES else None


def prefer_refusal(value: Any) -> RoutingRefused:
    """The one refusal (a 400) of a ``prefer`` outside :data:`PREFERENCES` (every endpoint
    uses it)."""
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    return RoutingRefused(
        f"Invalid value for 'prefer': {shown}. Use one of: {', '.join(PREFERENCES)}.",
        code="invalid_value",
        param="prefer",
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


def _ignored(
    model: ModelView,
    params: Mapping[str, Any],
    vendor_rules: Mapping[str, ParamRule] | None = None,
) -> tuple[str, ...]:
    """The parameters with no effect on ``model`` as one vendor serves it: the model's matrix
    or the vendor's ``vendor_rules`` say so, or ``top_k`` without a sampling ``temperature``
    (greedy decoding, as when temperature is absent or below 0.001, never looks past the most
    probable token)."""
    ignored = {p for p, s in parameter_effects(model, params).items() if s is Support.NO_EFFECT}
    for parameter, rule in (vendor_rules or {}).items():
        if parameter in params and rule.effect(params[parameter]) is Support.NO_EFFECT:
            ignored.add(parameter)
    if "top_k" in params and not _samples(params.get("temperature")):
        ignored.add("top_k")
    return tuple(sorted(ignored))


def _samples(temperature: Any) -> bool:
    return isinstance(temperature, int | float) and temperature >= 0.001


def _parameter_refusal(model: ModelView, parameter: str, value: Any) -> RoutingRefused:
    rule = model.rule(parameter)
    if rule.exceeds(value):
        if parameter == "logit_bias":
            return RoutingRefused(
                f"Invalid value for 'logit_bias': token id {largest(value)} is outside the "
                f"vocabulary of model '{model.model_id}' (token ids 0 to {rule.max_value}).",
                code="invalid_value",
                param=parameter,
            )
        return RoutingRefused(
            f"Invalid value for '{parameter}': {value}. Model '{model.model_id}' accepts at most "
            f"{rule.max_value}.",
            code="invalid_value",
            param=parameter,
        )
    if rule.accepted_values:
        accepted = " or ".join(repr(v) for v in rule.accepted_values)
        hint = (
            " Use 'repetition_penalty' to penalize repetition."
            if parameter in ("presence_penalty", "frequency_penalty")
            else ""
        )
        return RoutingRefused(
            f"Invalid value for '{parameter}': {value!r}. Model '{model.model_id}' does not "
            f"implement '{parameter}', so only {accepted} is accepted.{hint}",
            code="invalid_value",
            param=parameter,
        )
    return RoutingRefused(
        f"Model '{model.model_id}' does not support the parameter '{parameter}'; remove it or "
        f"choose another model.",
        code="unsupported_parameter",
        param=parameter,
    )


def _unknown_model(name: str) -> ModelNotFound:
    return ModelNotFound(f"The model '{name}' does not exist or you do not have access to it.")


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


@dataclass(frozen=True, slots=True)
class _Unusable:
    reason: str  # for customers
    permanent: bool  # waiting will not change it


def _availability(
    offering: OfferingView, health: Mapping[str, VendorHealth], now: datetime, usage: Usage
) -> tuple[PriceSnapshot, VendorHealth, int] | _Unusable:
    """Price, health and expected cost of a usable offering, or why it is not usable."""
    if offering.unroutable_reason is not None:
        return _Unusable(offering.unroutable_reason, offering.unroutable_permanent)
    vendor_health = health.get(offering.vendor, VendorHealth())
    if vendor_health.state is CircuitState.OPEN:
        return _Unusable(f"vendor {offering.vendor} is failing right now", False)
    price = offering.price_at(now)
    if price is None:
        return _Unusable(f"vendor {offering.vendor} has no price for this model", True)
    return price, vendor_health, cost_nanos(price=price, usage=usage)


@dataclass(frozen=True, slots=True)
class _Refused:
    """An offering left out because its vendor refuses ``param`` (whatever the model)."""

    offering: OfferingView
    model: ModelView
    param: str
    value: Any
    rule: ParamRule

    @property
    def reason(self) -> str:
        """The ``excluded`` phrase: ``vendor groq does not accept 'logit_bias'``."""
        what = f"'{self.param}'"
        if self.rule.accepted_values:
            what += f" = {_shown(self.value)}"
        return f"vendor {self.offering.vendor} does not accept {what}"


def _vendor_refusal(
    offering: OfferingView, model: ModelView, params: Mapping[str, Any]
) -> _Refused | None:
    """The first parameter of ``params`` (by name) that ``offering``'s vendor refuses, or
    ``None`` when its vendor takes them all."""
    for parameter in sorted(params):
        rule = offering.vendor_rules.get(parameter)
        if rule is not None and rule.effect(params[parameter]) is Support.FAILS:
            return _Refused(offering, model, parameter, params[parameter], rule)
    return None


def _vendor_refusals_error(refused: list[_Refused], *, pinned_vendor: str | None) -> RoutingRefused:
    """The 400 when the only offerings that could serve a request now are on vendors that
    refuse one of its parameters: names the parameter the most of them refuse (ties: the
    first), the vendors, and what to do instead."""
    counts: dict[str, int] = {}
    for r in refused:
        counts[r.param] = counts.get(r.param, 0) + 1
    param = max(counts, key=lambda p: counts[p])
    blamed = [r for r in refused if r.param == param]
    first = blamed[0]
    vendors = ", ".join(dict.fromkeys(r.offering.vendor for r in blamed))
    if first.rule.accepted_values:
        accepted = " or ".join(repr(v) for v in first.rule.accepted_values)
        what = f"'{param}' = {_shown(first.value)} (only {accepted} is accepted there)"
        code = "invalid_value"
    else:
        what = f"the parameter '{param}'"
        code = "unsupported_parameter"
    if pinned_vendor is not None:
        head = f"Vendor '{pinned_vendor}' does not accept {what} for model '{first.model.model_id}'"
        hint = "remove it, or name the model without a vendor (or another vendor)"
    else:
        head = f"The vendors that can serve this request now ({vendors}) do not accept {what}"
        hint = "remove it or change its value"
    return RoutingRefused(f"{head}; {hint}.", code=code, param=param)


def _candidate(item: _Eligible, request: RoutingRequest, score: int) -> Candidate:
    offering = item.offering
    return Candidate(
        offering_id=offering.offering_id,
        vendor=offering.vendor,
        adapter_kind=offering.adapter_kind,
        base_url=offering.base_url,
        credentials_env=offering.credentials_env,
        region=offering.region,
        api_version=offering.api_version,
        upstream_model=offering.upstream_model,
        model=item.model.model_id,
        price=item.price,
        rules=item.model.rules,
        ignored_params=_ignored(item.model, request.params, offering.vendor_rules),
        health=item.health.state,
        expected_cost_nanos=item.cost_nanos,
        quality_tier=item.model.quality_tier,
        score=score,
        context_window=item.model.context_window,
        max_output_tokens=item.model.max_output_tokens,
        default_output_tokens=item.model.default_output_tokens,
        tokenizer=item.model.tokenizer,
    )


@dataclass(frozen=True, slots=True)
class _Unmet:
    """One thing the request needs that a model does not give.

    ``param``: the request field it is blamed on; ``error``: the 400 a pin on the model gets;
    ``reason``: a short phrase for the ``excluded`` list of a routing mode.
    """

    param: str
    error: RoutingRefused
    reason: str


def _unmet(model: ModelView, request: RoutingRequest) -> list[_Unmet]:
    """Everything ``request`` needs that ``model`` does not give, most basic first."""
    found: list[_Unmet] = []
    for capability in sorted(request.capabilities - model.capabilities):
        param = _CAPABILITY_PARAM.get(capability, "model")
        words = _CAPABILITY_WORDS.get(capability, capability)
        found.append(
            _Unmet(
                param,
                RoutingRefused(
                    f"Model '{model.model_id}' does not support {words}; choose a model that "
                    f"does, or use model 'auto'.",
                    code="unsupported_capability",
                    param=param,
                ),
                f"no {words}",
            )
        )
    for parameter in _failing(model, request.params):
        error = _parameter_refusal(model, parameter, request.params[parameter])
        rule = model.rule(parameter)
        if rule.exceeds(request.params[parameter]):
            reason = f"'{parameter}' above its limit of {rule.max_value}"
        else:
            reason = f"'{parameter}' not supported at this value"
        found.append(_Unmet(parameter, error, reason))
    found.extend(_limits_unmet(model, request))
    return found


def _limits_unmet(model: ModelView, request: RoutingRequest) -> list[_Unmet]:
    """The context window and output limit, as OpenAI words their 400s."""
    found = []
    wanted = request.max_output_tokens
    name = request.max_output_param
    if wanted is not None and model.max_output_tokens and wanted > model.max_output_tokens:
        found.append(
            _Unmet(
                name,
                RoutingRefused(
                    f"'{name}' is too large: {wanted}. Model '{model.model_id}' supports at most "
                    f"{model.max_output_tokens} output tokens.",
                    code="invalid_value",
                    param=name,
                ),
                f"at most {model.max_output_tokens} output tokens",
            )
        )
    prompt = request.prompt_tokens
    if prompt is not None and model.context_window:
        total = prompt + (wanted or 0)
        if total > model.context_window:
            asked = f"{prompt} in the messages" + (
                f", {wanted} in the completion" if wanted else ""
            )
            found.append(
                _Unmet(
                    "messages",
                    RoutingRefused(
                        f"This model's maximum context length is {model.context_window} tokens. "
                        f"However, you requested {total} tokens ({asked}). Please reduce the "
                        "length of the messages or completion.",
                        code="context_length_exceeded",
                        param="messages",
                    ),
                    f"context window of {model.context_window} tokens too small",
                )
            )
    return found


def _no_model_meets(
    request: RoutingRequest, servable: list[ModelView], unmet: Mapping[str, list[_Unmet]]
) -> RoutingRefused:
    """The 400 of a routing mode when every model that could serve the endpoint misses
    something: blames the field that rules out the most of them and lists those meeting it."""
    blocked: dict[str, int] = {}
    for model in servable:
        for param in dict.fromkeys(u.param for u in unmet[model.model_id]):
            blocked[param] = blocked.get(param, 0) + 1
    param = max(blocked, key=lambda p: blocked[p])  # dicts keep order: ties go to the first
    first = next(u for m in servable for u in unmet[m.model_id] if u.param == param)
    meeting = [m.model_id for m in servable if all(u.param != param for u in unmet[m.model_id])]
    if first.error.code == "context_length_exceeded":
        largest_window = max(m.context_window for m in servable)
        what = (
            f"This request needs {request.prompt_tokens or 0} prompt tokens"
            + (
                f" plus {request.max_output_tokens} output tokens"
                if request.max_output_tokens
                else ""
            )
            + f", more than the context window of any model available for it (at most "
            f"{largest_window} tokens). Please reduce the length of the messages or completion"
        )
    elif param == request.max_output_param and first.error.code == "invalid_value":
        most = max(m.max_output_tokens for m in servable)
        what = (
            f"'{param}' is too large: {request.max_output_tokens}. The models available for this "
            f"request support at most {most} output tokens"
        )
    else:
        capability = next(
            (c for c, p in _CAPABILITY_PARAM.items() if p == param and c in request.capabilities),
            None,
        )
        if capability is not None and first.error.code == "unsupported_capability":
            need = _CAPABILITY_WORDS[capability]
        else:
            need = f"'{param}' with the value {_shown(request.params.get(param))}"
        what = f"No model available for this request supports {need} ('{param}')"
    listing = (
        f" Models that do: {', '.join(meeting)}."
        if meeting
        else " No model available here does; remove the parameter or change its value."
    )
    return RoutingRefused(what + "." + listing, code=first.error.code, param=param)


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unavailable(head: str, unusable: list[tuple[str, _Unusable]], hint: str = "") -> NoRoute:
    """The refusal (a 503) when ``unusable`` (``(label, why)``) is all there is: ``head``, the
    reasons, then ``hint`` (what the caller could send instead); permanent when every reason
    is (or there is nothing at all)."""
    reasons = "; ".join(f"{label}: {u.reason}" for label, u in unusable[:_MAX_EXCLUDED])
    return NoRoute(
        f"{head} ({reasons or 'no vendor offers it'}).{hint}",
        permanent=all(u.permanent for _label, u in unusable),
        reasons=tuple((label, u.reason) for label, u in unusable),
    )


def _servable_now(snapshot: CatalogSnapshot, capabilities: frozenset[str]) -> list[ModelView]:
    """The models with every one of ``capabilities`` that some vendor can serve (circuits
    aside), by id."""
    return [
        m
        for m in sorted(snapshot.models.values(), key=lambda m: m.model_id)
        if capabilities <= m.capabilities
        and any(o.routable for o in snapshot.offerings_of(m.model_id))
    ]


def _instead(snapshot: CatalogSnapshot, request: RoutingRequest, *, pinned: bool) -> str:
    """What would make a refused request routable, for the 503's message: the tasks (for a
    ``task`` nothing serves) or the models (for a pinned model) that can serve its endpoint
    now, or that nothing here can."""
    base = request.capabilities - _CAPABILITY_PARAM.keys()
    servable = _servable_now(snapshot, frozenset(base))
    if not servable:
        return " No model here can serve this endpoint now."
    if request.task is not None and not pinned:
        tasks = sorted({t for m in servable for t in m.tasks})
        return (
            f" Tasks that can be served now: {', '.join(tasks)}; send one of them, or no "
            "'task', to route this request."
        )
    names = [m.model_id for m in servable[:_MAX_EXCLUDED]]
    return f" Models that can serve it now: {', '.join(names)}; name one as 'model', or 'auto'."


def _usable(
    model: ModelView,
    offerings: Iterable[OfferingView],
    *,
    request: RoutingRequest,
    health: Mapping[str, VendorHealth],
    now: datetime,
    usage: Usage,
) -> tuple[list[_Eligible], list[tuple[str, _Unusable]], list[_Refused]]:
    """``model``'s ``offerings`` split into those usable now, the others with why (labelled
    ``vendor/model``, in the given order), and — among those others — the ones whose vendor
    refuses a parameter of ``request`` (:func:`_vendor_refusal`)."""
    eligible: list[_Eligible] = []
    unusable: list[tuple[str, _Unusable]] = []
    refused: list[_Refused] = []
    for offering in offerings:
        label = f"{offering.vendor}/{model.model_id}"
        refusal = _vendor_refusal(offering, model, request.params)
        if refusal is not None:
            refused.append(refusal)
            unusable.append((label, _Unusable(refusal.reason, True)))
            continue
        found = _availability(offering, health, now, usage)
        if isinstance(found, _Unusable):
            unusable.append((label, found))
        else:
            eligible.append(_Eligible(model, offering, *found))
    return eligible, unusable, refused


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
    unmet = _unmet(model, request)
    if unmet:
        raise unmet[0].error
    offerings = [o for o in snapshot.offerings_of(model.model_id) if vendor_pin in (None, o.vendor)]
    if vendor_pin is not None and not offerings:
        raise ModelNotFound(f"Vendor '{vendor_pin}' does not serve the model '{model.model_id}'.")
    eligible, unusable, refused = _usable(
        model, offerings, request=request, health=health, now=now, usage=usage
    )
    excluded = [Exclusion(label, why.reason) for label, why in unusable]
    if not eligible:
        if any(r.offering.routable or vendor_pin for r in refused):
            raise _vendor_refusals_error(refused, pinned_vendor=vendor_pin)
        raise _unavailable(
            f"The model '{model.model_id}' cannot be served right now",
            unusable,
            _instead(snapshot, request, pinned=True),
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
        candidates=tuple(_candidate(e, request, 0) for e in eligible),
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
            raise RoutingRefused(
                f"Unknown task '{task}'. Known tasks: {', '.join(known)}.",
                code="invalid_value",
                param="task",
            )
    base = request.capabilities - _CAPABILITY_PARAM.keys()
    needs = ", ".join(sorted(base))
    relevant = [
        m
        for m in sorted(snapshot.models.values(), key=lambda m: m.model_id)
        if base <= m.capabilities and (task is None or task in m.tasks)
    ]
    # Models some vendor can serve at all (circuits aside): the ones a request is matched to.
    servable = [m for m in relevant if any(o.routable for o in snapshot.offerings_of(m.model_id))]
    if not servable:
        head = (
            f"No model can serve this request right now: none of the models offering {needs}"
            + (f" for task '{task}'" if task else "")
            + " is available"
        )
        unusable = [
            (
                f"{o.vendor}/{m.model_id}",
                _Unusable(o.unroutable_reason or "", o.unroutable_permanent),
            )
            for m in relevant
            for o in snapshot.offerings_of(m.model_id)
        ]
        raise _unavailable(head, unusable, _instead(snapshot, request, pinned=False))
    unmet = {m.model_id: _unmet(m, request) for m in servable}
    fitting = [m for m in servable if not unmet[m.model_id]]
    if not fitting:
        raise _no_model_meets(request, servable, unmet)
    excluded = [
        Exclusion(m.model_id, unmet[m.model_id][0].reason) for m in servable if unmet[m.model_id]
    ]
    eligible: list[_Eligible] = []
    unusable_now: list[tuple[str, _Unusable]] = []
    refused_now: list[_Refused] = []
    for model in fitting:
        usable, unusable, refused = _usable(
            model,
            snapshot.offerings_of(model.model_id),
            request=request,
            health=health,
            now=now,
            usage=usage,
        )
        eligible += usable
        unusable_now += unusable
        refused_now += refused
        excluded += [Exclusion(label, why.reason) for label, why in unusable]
    if not eligible:
        if any(r.offering.routable for r in refused_now):
            raise _vendor_refusals_error(refused_now, pinned_vendor=None)
        raise _unavailable(
            "No model can serve this request right now",
            unusable_now,
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
            _candidate(e, request, scores.get(e.offering.offering_id, 0)) for e in eligible
        ),
        excluded=tuple(excluded),
    )


def _preference(mode: str, prefer: str | None) -> str:
    if mode != "auto":
        return mode
    chosen = prefer or "balanced"
    if chosen not in PREFERENCES:
        raise prefer_refusal(chosen)
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
