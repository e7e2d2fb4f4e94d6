"""What the non-chat endpoints share: their common fields, and one metered vendor call.

An endpoint validates its body first (400 before anything is counted, held or sent), then
:func:`open_call` counts it against the key's limits, routes it by the endpoint's capability
and holds the worst case; :func:`inference.stages.call_and_settle` calls the vendors with
failover and settles the hold exactly once on every exit path (vendor error, cancellation,
success). After it returns the call is finished: the caller only renders the answer with
``render.infrai(call)`` and ``render.headers(call)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from catalog.routing import Candidate, RoutingRequest
from config.errors import InvalidRequest, invalid_type, missing_param
from inference import response_cache, stages
from inference.call import Call
from inference.http import ApiRequest
from inference.usage import Billed
from inference.validation import EXTENSIONS, check_routing_fields, invalid_choice
from inference.vendors.base import JSON, Adapter, VendorTarget
from infra.background import spawn
from money.pricing import Usage

T = TypeVar("T")
VendorCall = Callable[[Adapter, VendorTarget, Candidate], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing fields every endpoint accepts: ``model`` (mode, model or ``vendor/model``)
    and ``task`` / ``prefer`` from ``extra_body``."""

    model: str
    task: str | None
    prefer: str | None


def reject_unknown(data: dict[str, Any], allowed: Iterable[str]) -> None:
    """400 ``unknown_parameter`` naming the first field of ``data`` not in ``allowed`` (nor
    the platform's :data:`~inference.validation.EXTENSIONS`)."""
    unknown = sorted(set(data).difference(allowed, EXTENSIONS))
    if unknown:
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {unknown[0]}",
            code="unknown_parameter",
            param=unknown[0],
        )


def routing_fields(data: dict[str, Any], *, default_model: str = "auto") -> Routing:
    """``model`` (default ``auto``), ``task`` and ``prefer``, type-checked (400 names the field)."""
    model = data.get("model", default_model)
    if not isinstance(model, str) or not model.strip():
        raise invalid_type("model", "a non-empty string")
    check_routing_fields(data)
    return Routing(model=model.strip(), task=data.get("task"), prefer=data.get("prefer"))


def choice(data: dict[str, Any], name: str, allowed: Iterable[str], default: str) -> str:
    """The string field ``name`` (``default`` when absent), or a 400 listing ``allowed``."""
    value = data.get(name)
    if value is None:
        return default
    options = tuple(allowed)
    if value not in options:
        raise invalid_choice(name, value, options)
    return str(value)


def required_text(data: dict[str, Any], name: str, max_chars: int) -> str:
    """The required string field ``name`` with 1..``max_chars`` characters, else a 400."""
    text = optional_string(data, name)
    if text is None:
        raise missing_param(name)
    if not text.strip() or len(text) > max_chars:
        raise InvalidRequest(f"'{name}' must hold 1 to {max_chars} characters.", param=name)
    return text


def optional_string(data: dict[str, Any], name: str) -> str | None:
    """The string field ``name`` (``None`` when absent), else a 400."""
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid_type(name, "a string")
    return value


async def open_call(
    request: ApiRequest,
    *,
    endpoint: str,
    routing: Routing,
    capability: str,
    limit_tokens: int,
    expected: Usage,
    worst_case: Callable[[Candidate], Usage],
    params: dict[str, Any] | None = None,
) -> Call:
    """Route → limit → hold for one validated request; the returned call holds money.

    Raises 400/404/503 (routing: a pinned model without ``capability`` is a 400
    ``unsupported_capability`` naming both; a parameter no available model accepts is a 400
    naming it), 429 (limits) and 402 (hold) — in each case nothing is held. Routing comes first
    so a request no model can serve is a 400 before it counts against the key's limits.
    The caller must pass the returned call to :func:`inference.stages.call_and_settle`, which
    settles it.
    """
    call = Call.open(request, endpoint=endpoint, requested_model=routing.model)
    await stages.route(
        call,
        RoutingRequest(
            model=routing.model,
            capabilities=frozenset({capability}),
            params=params or {},
            task=routing.task,
            prefer=routing.prefer,
            expected_usage=expected,
        ),
    )
    await stages.admit(call, tokens=limit_tokens)
    await stages.hold(call, worst_case)
    return call


async def call_cached(
    request: ApiRequest,
    *,
    endpoint: str,
    capability: str,
    routing: Routing,
    cache_data: dict[str, Any],
    texts: list[str],
    likely_tokens: int,
    worst_tokens: int,
    fn: VendorCall[JSON],
    usage_of: Callable[[JSON], Billed],
    params: dict[str, Any] | None = None,
) -> tuple[Call, JSON]:
    """One deterministic call billed by input tokens, through the exact cache: ``(call, vendor
    body)``. The call is finished when it returns.

    A hit (``cache_data`` — the request body — seen before by this organization, or an
    identical request in flight in this process) counts ``likely_tokens`` against the key's
    limits, costs nothing and is logged; the body is the one the vendor gave the first caller.
    A miss opens the call (:func:`open_call`: routed by ``capability`` and ``params``, limited
    by ``likely_tokens``, ``worst_tokens`` of input held), logs ``texts`` as its prompt, calls
    the vendors (``fn``) and settles (:func:`inference.stages.call_and_settle` with
    ``usage_of``), and caches the body with the usage it was billed for (a hit logs that
    usage, at no cost).
    """
    key = response_cache.cache_key(
        organization_id=request.caller.organization_id,
        endpoint=endpoint,
        payload={k: v for k, v in cache_data.items() if k != "user"},
        extra=[routing.task, routing.prefer],
    )
    hit = await response_cache.find(key)
    if hit is not None:
        call = Call.open(request, endpoint=endpoint, requested_model=routing.model)
        await stages.admit(call, tokens=likely_tokens)
        await stages.finish_cached(call, hit, Usage(**hit["usage"]))
        return call, dict(hit["body"])
    worst = Usage(input_tokens=worst_tokens)
    leader = response_cache.lead(key)
    try:
        call = await open_call(
            request,
            endpoint=endpoint,
            routing=routing,
            capability=capability,
            limit_tokens=likely_tokens,
            expected=Usage(input_tokens=likely_tokens),
            worst_case=lambda _candidate: worst,
            params=params,
        )
        call.prompt = lambda: "\n".join(texts)
        body = await stages.call_and_settle(call, fn, usage_of)
        entry = {"body": body, "usage": dataclasses.asdict(call.usage), **call.answer.entry()}
        leader.done(entry)
        spawn(leader.store(entry))
        return call, body
    finally:
        leader.close()
