"""The stages every metered ``/v1`` call crosses, in order, each a function over the call's
record (:class:`inference.call.Call`, whose context is immutable):

1. authenticate — :class:`inference.http.V1App` (:mod:`accounts.auth`), before the body is read;
2. parse and validate — the endpoint's dialect (e.g. :mod:`inference.chat.validation`);
3. :func:`route` — :mod:`catalog.routing`;
4. :func:`admit` — the key's rate limits, :mod:`inference.limits` (confirms the key);
5. :func:`hold` — the worst case over the candidates, :mod:`inference.settlement`;
6. :func:`call_vendor` — the candidates in order with failover (:mod:`inference.vendors`);
7. settle — bill what the answer used and :func:`inference.settlement.finish`;
8. render — the endpoint's dialect, with :mod:`inference.render`.

An endpoint whose answer comes back whole declares its vendor leg as data (:class:`Leg`: what
it holds for a candidate, what it sends it, what it bills) and runs :func:`settle_leg`; a
stream hands its leg to the one metered relay (:mod:`inference.relay`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from django.conf import settings

from catalog import health
from catalog.routing import Candidate, RoutingDecision, RoutingRequest
from catalog.selectors import credentials_value, routing_decide
from catalog.types import CircuitState
from config.errors import (
    ApiError,
    InvalidRequest,
    NoRoutableOffering,
    ServiceUnavailable,
    UpstreamError,
    UpstreamTimeout,
    internal_error,
)
from inference import limits, settlement
from inference.call import Call, Served
from inference.errors import api_error
from inference.floor import SHUTTING_DOWN_CODE
from inference.models import RequestStatus
from inference.usage import Billed
from inference.vendors.base import Adapter, VendorTarget
from inference.vendors.errors import VendorError, VendorLoading, VendorRejected, VendorTimeout
from inference.vendors.registry import adapter_for
from infra import observability, outages
from infra.background import spawn
from money.pricing import Usage, cost_nanos

log = logging.getLogger(__name__)
P = TypeVar("P")
T = TypeVar("T")
VendorCall = Callable[[Adapter, VendorTarget, Candidate], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class Leg(Generic[P, T]):
    """An endpoint's vendor leg, declared once per endpoint over its parsed request ``P``:
    the most a candidate can consume (the hold), what it is sent (answer ``T``), and what to
    bill for the answer (which may raise an :class:`ApiError` for one that cannot be billed)."""

    worst_case: Callable[[P, Candidate], Usage]
    send: Callable[[Adapter, VendorTarget, Candidate, P], Awaitable[T]]
    bill: Callable[[Call, P, T], Billed]


# --- 3. route ---------------------------------------------------------------------------------
@observability.traced("infrai.route")
async def route(call: Call, routing: RoutingRequest) -> RoutingDecision:
    """The routing decision; routing's refusals (:mod:`catalog.errors`: a 400, 404 or 503
    once :func:`inference.errors.api_error` answers them) raise as they are."""
    call.decision = await routing_decide(request=routing)
    return call.decision


# --- 4. admit ---------------------------------------------------------------------------------
async def admit(call: Call, *, tokens: int) -> None:
    """Count the call against the key's rate limits (429 raises) and confirm the key is still
    current (401 raises); from here on the call's context has the confirmed key."""
    state, confirmed = await limits.admit(call.key, tokens=tokens)
    call.request.key, call.request.key_confirmed = confirmed, True
    call.ctx = replace(call.ctx, key=confirmed)
    call.limit_headers = state.headers()


# --- 5. hold ----------------------------------------------------------------------------------
async def hold(call: Call, worst_case: Callable[[Candidate], Usage]) -> None:
    """Hold the worst case over every routed candidate (failover may pick any of them):
    :func:`inference.settlement.open_hold`."""
    assert call.decision is not None
    amount = max(cost_nanos(price=c.price, usage=worst_case(c)) for c in call.decision.candidates)
    await settlement.open_hold(call, amount)


# --- 6. call the vendor -----------------------------------------------------------------------
def target_for(candidate: Candidate) -> VendorTarget:
    """How to reach ``candidate`` (the secret is read now, from settings/environment)."""
    return VendorTarget(
        vendor=candidate.vendor,
        base_url=candidate.base_url,
        upstream_model=candidate.upstream_model,
        api_key=credentials_value(candidate.credentials_env) or None,
        connect_timeout_s=settings.INFRAI_VENDOR_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.INFRAI_VENDOR_READ_TIMEOUT_S,
        region=candidate.region,
        api_version=candidate.api_version,
    )


@observability.vendor_call
async def call_vendor(call: Call, send: VendorCall[T]) -> T:
    """Try the candidates in order until one answers.

    Connect errors, timeouts, 429 and 5xx move on to the next candidate (the circuit breaker
    learns from each); a vendor's refusal of the request itself is a 400. When all fail: 504
    if the last failure was a timeout, else 502.
    """
    assert call.decision is not None
    last: VendorError | None = None
    for candidate in call.decision.candidates:
        if candidate.health is CircuitState.HALF_OPEN and not (
            await health.allow_request_async(candidate.vendor)
        ):
            continue
        started = time.perf_counter()
        try:
            result = await send(
                adapter_for(candidate.adapter_kind), target_for(candidate), candidate
            )
        except VendorRejected as exc:
            call.serve(candidate)
            # OpenAI's code and param where the vendor said which (context overflow …).
            raise InvalidRequest(
                f"The vendor serving '{candidate.model}' rejected the request: {exc.message}",
                code=exc.code or "vendor_rejected_request",
                param=exc.param,
            ) from exc
        except VendorError as exc:
            last = exc
            call.failovers += 1
            if not isinstance(exc, VendorLoading):  # a loading model is not a broken vendor
                spawn(health.arecord_failure(candidate.vendor))
            log.info("failover from %s: %s", candidate.label, exc.kind)
            observability.vendor_failed(candidate.vendor, exc.kind)
            continue
        call.serve(candidate)
        spawn(health.arecord_success(candidate.vendor, int((time.perf_counter() - started) * 1000)))
        return result
    call.failovers = max(call.failovers - 1, 0)
    raise _all_failed(last)


def _all_failed(last: VendorError | None) -> ApiError:
    """The answer when no candidate answered (``last``: the last one's failure)."""
    if last is None:
        return NoRoutableOffering(
            "No vendor can serve this request right now (every circuit is open).",
            code="no_routable_offering",
        )
    if isinstance(last, VendorTimeout):
        return UpstreamTimeout(
            "Every vendor that can serve this request timed out after "
            f"{settings.INFRAI_VENDOR_READ_TIMEOUT_S:g} s without an answer; the generation "
            "was stopped. The same request would take as long again: set a lower "
            "'max_tokens', or stream the answer ('stream': true)."
        )
    if isinstance(last, VendorLoading):
        wait = last.retry_after_s
        return ServiceUnavailable(
            f"The model is still loading; retry after {wait} s.",
            code="model_loading",
            headers={"retry-after": str(wait)},
        )
    return UpstreamError(f"Every vendor that can serve this request failed; last: {last.kind}.")


def vendor_failed_midway(call: Call) -> None:
    """The serving vendor broke after the response started: the circuit learns of it."""
    if call.served_by is not None:
        spawn(health.arecord_failure(call.served_by.vendor))


# --- 7. settle --------------------------------------------------------------------------------
async def settle_leg(call: Call, leg: Leg[P, T], parsed: P) -> T:
    """Stages 6–7 for a call that holds ``leg``'s worst case (:func:`hold`): call the
    vendors with failover (``leg.send``), bill the answer (``leg.bill``) and finish the call
    (:func:`call_and_settle`)."""
    return await call_and_settle(
        call,
        lambda adapter, target, candidate: leg.send(adapter, target, candidate, parsed),
        lambda answer: leg.bill(call, parsed, answer),
    )


async def call_and_settle(call: Call, send: VendorCall[T], usage_of: Callable[[T], Billed]) -> T:
    """:func:`call_vendor`, bill ``usage_of(result)`` and finish the call.

    ``usage_of`` says what to bill for the answer (:class:`~inference.usage.Billed`); it may
    raise an :class:`ApiError` for an answer that cannot be billed or rendered. On every exit
    the hold is settled exactly once (:func:`closed_on_failure`): a vendor error or a refused
    answer charges nothing and re-raises; a cancelled call (client gone) is logged as 499;
    anything else as a 500.
    """
    async with closed_on_failure(call):
        result = await call_vendor(call, send)
        billed = usage_of(result)
    call.bill(billed)
    await settlement.finish(call, status=RequestStatus.OK, http_status=200)
    return result


async def finish_cached(call: Call, entry: dict[str, Any], usage: Usage) -> None:
    """Finish a call answered from the exact cache: reported as served by whoever served
    ``entry``, ``usage`` logged, nothing charged."""
    call.cache_hit = True
    call.answer = Served.of_entry(entry)
    call.charge(usage)
    await settlement.finish(call, status=RequestStatus.OK, http_status=200)


@asynccontextmanager
async def closed_on_failure(call: Call) -> AsyncIterator[None]:
    """Any failure inside the block closes the call — logged, settled with nothing charged,
    then re-raised: an :class:`ApiError` with its status, a cancellation (the client left) as
    499, anything else as a 500."""
    try:
        yield
    except ApiError as exc:
        await settlement.fail(call, exc)
        raise
    except asyncio.CancelledError:
        call.charge(Usage())
        if not call.shutting_down:
            await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)
            raise
        # The server is draining: the client gets a 503 it may retry elsewhere.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        stopped = ServiceUnavailable(
            "The server is restarting and ended this request before it was answered; "
            "nothing was charged. Retry the request.",
            code=SHUTTING_DOWN_CODE,
        )
        await settlement.fail(call, stopped)
        raise stopped from None
    except Exception as exc:
        refused = api_error(exc)  # a refusal of billing or the catalog: answered as such
        if refused is not None:
            await settlement.fail(call, refused)
            raise refused from exc
        await settlement.fail(call, outages.unavailable(exc) or internal_error())
        raise
