"""The steps every ``/v1`` call shares after validation, each in one place.

limit → route → hold → call with failover → settle + record → respond. Endpoints compose
them; :mod:`inference.relay` adds streaming. Money rules:

- A hold is opened before any vendor call, and the opening cannot be half-cancelled: a client
  that leaves while it is being opened gets it released (:meth:`Call.hold`).
- Every exit path after it ends in :meth:`Call.finish`, which writes the request-log row and
  settles the hold **in one statement** on the event loop, in a task shielded from the
  request's cancellation (a client leaving cannot stop it). Text PostgreSQL cannot store is
  cleaned first; if the row still cannot be written, the hold is settled anyway and a minimal
  row written — a failed log write never leaves a hold open or a call free.
- While a call holds money this process renews its hold (:func:`_renew_holds`), so only holds
  of dead processes expire.
- :func:`drain` (process shutdown) refuses new calls, lets calls in flight finish for a grace
  period, then ends the rest and bills what each delivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
from django.conf import settings
from django.db import models

from accounts.auth import KeyContext
from billing import journal
from billing.services import (
    ahold_open,
    aholds_renew,
    aprocess_seen,
    arequest_low_balance,
    arequest_recharge,
    asettle,
)
from catalog import health
from catalog.routing import Candidate, RoutingDecision, RoutingRequest
from catalog.selectors import credentials_value, routing_decide
from catalog.types import CircuitState
from config import observability, outages
from config.background import keep, pending, spawn
from config.errors import (
    ApiError,
    InvalidRequest,
    NoRoutableOffering,
    ServiceUnavailable,
    UpstreamError,
    UpstreamTimeout,
    internal_error,
)
from inference import limits, response_cache
from inference.errors import api_error
from inference.http import ApiRequest, on_unlogged_failure
from inference.models import RequestLog, RequestStatus, UsageSource
from inference.usage import Billed
from inference.vendors import fetch as image_fetch
from inference.vendors import http as vendor_http
from inference.vendors.base import Adapter, VendorTarget
from inference.vendors.errors import VendorError, VendorLoading, VendorRejected, VendorTimeout
from inference.vendors.registry import adapter_for
from infra import adb, live
from money.pricing import Usage, cost_nanos
from money.usd import nanos_to_usd_str

log = logging.getLogger(__name__)
T = TypeVar("T")
# Calls of this process that hold money and are not finished (renewal, drain, exit hook).
_inflight: set[Call] = set()
# The event loops whose server is draining (one per server: tests run several in a process).
_draining: set[asyncio.AbstractEventLoop] = set()
_renewers: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}
SHUTTING_DOWN_CODE = "server_shutting_down"


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


@dataclass
class Call:
    """One metered call: its caller, routing, hold and outcome."""

    request: ApiRequest
    endpoint: str
    requested_model: str
    stream: bool = False
    limit_headers: dict[str, str] = field(default_factory=dict)
    decision: RoutingDecision | None = None
    served_by: Candidate | None = None
    hold_nanos: int = 0
    held: bool = False
    failovers: int = 0
    usage: Usage = field(default_factory=Usage)
    usage_estimated: bool = False
    # Where ``usage`` came from (the vendor's report, our count, the output cap): the request
    # log's ``usage_source`` (``inference.usage.reconcile``).
    usage_source: UsageSource = UsageSource.VENDOR
    cost_nanos: int = 0
    cache_hit: bool = False
    ttft_ms: int | None = None
    # The prompt as the request log keeps it, made only for organizations that log prompts
    # (a large body would cost its rendering on every call otherwise).
    prompt: Callable[[], str] = lambda: ""
    finished: bool = False
    cached: dict[str, Any] | None = None  # who served the cached answer (cache hits)
    usage_so_far: Callable[[], Usage] | None = None  # set while streaming (shutdown billing)
    task: asyncio.Task[Any] | None = None  # the request's task (drain cancels it)
    shutting_down: bool = False  # set by drain before it cancels ``task``
    renewed_at: float = field(default_factory=time.monotonic)  # the hold's last (re)start
    checkpointed_at: float = field(default_factory=time.monotonic)  # its last checkpoint
    note: str = ""  # the log's code for a successful call with a caveat (vendor_usage_invalid)

    __hash__ = object.__hash__  # identity: calls are kept in the in-flight set

    def __post_init__(self) -> None:
        self.request.requested_model = self.requested_model

    @property
    def key(self) -> KeyContext:
        return self.request.caller

    # --- limit / route / hold -----------------------------------------------------------
    async def limit(self, *, tokens: int) -> None:
        """Count the call against the key's rate limits (429 raises) and confirm the key is
        still current (401 raises; from here on ``key`` is the confirmed context)."""
        state, self.request.key = await limits.admit(self.key, tokens=tokens)
        self.request.key_confirmed = True
        self.limit_headers = state.headers()

    @observability.traced("infrai.route")
    async def route(self, routing: RoutingRequest) -> RoutingDecision:
        """The routing decision; routing's refusals (:mod:`catalog.errors`: a 400, 404 or 503
        once :func:`inference.errors.api_error` answers them) raise as they are."""
        self.decision = await routing_decide(request=routing)
        return self.decision

    @observability.traced("infrai.hold")
    async def hold(self, *, worst_case: Callable[[Candidate], Usage]) -> None:
        """Reserve the worst case over every candidate (failover may pick any of them).

        A limit that cannot cover it raises :class:`billing.errors.InsufficientFunds` as it is
        (nothing held; a 402 once :func:`inference.errors.api_error` answers it). Refused with a
        503 ``server_shutting_down`` while the process drains. The opening runs
        in its own task: if the request is cancelled meanwhile, the hold is released as soon
        as it is open (logged as a 499), so a cancellation leaves nothing behind.
        """
        assert self.decision is not None
        if asyncio.get_running_loop() in _draining:
            raise ServiceUnavailable(
                "The server is restarting; retry the request.", code=SHUTTING_DOWN_CODE
            )
        amount = max(
            cost_nanos(price=c.price, usage=worst_case(c)) for c in self.decision.candidates
        )
        opening = asyncio.ensure_future(
            ahold_open(
                organization_id=self.key.organization_id,
                project_id=self.key.project_id,
                api_key_id=self.key.key_id,
                request_id=self.request.request_id,
                amount_nanos=amount,
                budget_nanos=self.key.monthly_budget_nanos,
                key_budget_nanos=self.key.key_budget_nanos,
                ttl_s=settings.INFRAI_HOLD_TTL_S,
            )
        )
        self.hold_nanos = amount
        try:
            await asyncio.shield(opening)
        except asyncio.CancelledError:
            spawn(self._release_when_open(opening))
            raise
        except Exception as exc:
            if not adb.lost(exc):
                raise
            # The connection died with the opening's answer: the hold may be open. Settle it
            # to nothing (a settlement finds no hold if none was opened) and answer the 503.
            self.held = True
            unavailable = outages.unavailable(exc)
            assert unavailable is not None
            await self.fail(unavailable)
            raise unavailable from None
        self.held = True
        self.task = asyncio.current_task()
        _inflight.add(self)
        _ensure_renewer()
        # Open wallet pages show the money held by running calls (no round trip unwatched).
        _announce(self.key.organization_id, lambda: {"kind": "wallet_changed"})

    async def _release_when_open(self, opening: asyncio.Future[None]) -> None:
        """The request was cancelled while its hold was opening: release it once open."""
        try:
            await opening
        except Exception:
            return  # refused or failed: nothing is held
        self.held = True
        self.charge(Usage())
        await self.finish(status=RequestStatus.CANCELLED, http_status=499)

    # --- call with failover ---------------------------------------------------------------
    @observability.vendor_call
    async def call(self, fn: Callable[[Adapter, VendorTarget, Candidate], Awaitable[T]]) -> T:
        """Try the candidates in order until one answers.

        Connect errors, timeouts, 429 and 5xx move on to the next candidate (the circuit
        breaker learns from each); a vendor's refusal of the request itself is a 400. When all
        fail: 504 if the last failure was a timeout, else 502.
        """
        assert self.decision is not None
        last: VendorError | None = None
        for candidate in self.decision.candidates:
            if candidate.health is CircuitState.HALF_OPEN and not (
                await health.allow_request_async(candidate.vendor)
            ):
                continue
            started = time.perf_counter()
            try:
                result = await fn(
                    adapter_for(candidate.adapter_kind), target_for(candidate), candidate
                )
            except VendorRejected as exc:
                self.served_by = candidate
                # OpenAI's code and param where the vendor said which (context overflow …).
                raise InvalidRequest(
                    f"The vendor serving '{candidate.model}' rejected the request: {exc.message}",
                    code=exc.code or "vendor_rejected_request",
                    param=exc.param,
                ) from exc
            except VendorError as exc:
                last = exc
                self.failovers += 1
                if not isinstance(exc, VendorLoading):  # a loading model is not a broken vendor
                    spawn(health.arecord_failure(candidate.vendor))
                log.info("failover from %s: %s", candidate.label, exc.kind)
                observability.vendor_failed(candidate.vendor, exc.kind)
                continue
            self.served_by = candidate
            spawn(
                health.arecord_success(
                    candidate.vendor, int((time.perf_counter() - started) * 1000)
                )
            )
            return result
        self.failovers = max(self.failovers - 1, 0)
        if last is None:
            raise NoRoutableOffering(
                "No vendor can serve this request right now (every circuit is open).",
                code="no_routable_offering",
            )
        if isinstance(last, VendorTimeout):
            raise UpstreamTimeout(
                "Every vendor that can serve this request timed out after "
                f"{settings.INFRAI_VENDOR_READ_TIMEOUT_S:g} s without an answer; the generation "
                "was stopped. The same request would take as long again: set a lower "
                "'max_tokens', or stream the answer ('stream': true)."
            )
        if isinstance(last, VendorLoading):
            wait = last.retry_after_s
            raise ServiceUnavailable(
                f"The model is still loading; retry after {wait} s.",
                code="model_loading",
                headers={"retry-after": str(wait)},
            )
        raise UpstreamError(f"Every vendor that can serve this request failed; last: {last.kind}.")

    async def call_and_settle(
        self,
        fn: Callable[[Adapter, VendorTarget, Candidate], Awaitable[T]],
        usage_of: Callable[[T], Billed],
    ) -> T:
        """:meth:`call` with failover, :meth:`bill` ``usage_of(result)`` and finish the call.

        ``usage_of`` says what to bill for the answer (:class:`~inference.usage.Billed`); it
        may raise an :class:`ApiError` for an answer that cannot be billed or rendered. On
        every exit the hold is settled exactly once (:meth:`closed_on_failure`): a vendor
        error or a refused answer charges nothing and re-raises; a cancelled call (client
        gone) is logged as 499; anything else as a 500.
        """
        async with self.closed_on_failure():
            result = await self.call(fn)
            billed = usage_of(result)
        self.bill(billed)
        await self.finish(status=RequestStatus.OK, http_status=200)
        return result

    async def finish_cached(self, entry: dict[str, Any], usage: Usage) -> None:
        """Finish a call answered from the exact cache: reported as served by whoever served
        ``entry``, ``usage`` logged, nothing charged."""
        self.cache_hit = True
        self.cached = response_cache.served(entry)
        self.charge(usage)
        await self.finish(status=RequestStatus.OK, http_status=200)

    def vendor_failed_midway(self) -> None:
        """The serving vendor broke after the response started: the circuit learns of it."""
        if self.served_by is not None:
            spawn(health.arecord_failure(self.served_by.vendor))

    # --- settle + record ------------------------------------------------------------------
    def charge(
        self,
        usage: Usage,
        *,
        estimated: bool = False,
        source: UsageSource | None = None,
        disputed: bool = False,
    ) -> int:
        """Price ``usage`` at the serving offering's price; capped at the hold.

        ``source``: where ``usage`` came from (default: our count when ``estimated``, else the
        vendor's); ``disputed``: it replaces what the vendor reported (or failed to report),
        counted in ``infrai_vendor_usage_disagreements_total`` for operators.
        """
        self.usage = usage
        self.usage_estimated = estimated
        if source is None:
            source = UsageSource.COUNTED if estimated else UsageSource.VENDOR
        self.usage_source = source
        if disputed and self.served_by is not None:
            observability.vendor_usage_disagreed(self.served_by.vendor, source)
        if self.served_by is None or self.cache_hit:
            self.cost_nanos = 0
        else:
            self.cost_nanos = min(
                cost_nanos(price=self.served_by.price, usage=usage), self.hold_nanos
            )
        return self.cost_nanos

    def bill(self, billed: Billed) -> int:
        """:meth:`charge` ``billed``, with its source, and its note for the request log."""
        if billed.note:
            self.note = billed.note
        return self.charge(
            billed.usage, estimated=billed.estimated, source=billed.source, disputed=billed.disputed
        )

    def delivered_nanos(self) -> int:
        """What a stream has delivered so far, priced and capped at the hold (its checkpoint;
        0 for a call that is not streaming)."""
        if self.usage_so_far is None or self.served_by is None or self.cache_hit:
            return 0
        return min(
            cost_nanos(price=self.served_by.price, usage=self.usage_so_far()), self.hold_nanos
        )

    def served(self) -> dict[str, Any]:
        """Vendor, model, region, routing reason and ignored parameters of the answer."""
        if self.cached is not None:
            return self.cached
        served = self.served_by
        if served is None:
            return {"vendor": "", "model": "", "region": "", "routing": {}, "ignored_params": []}
        return {
            "vendor": served.vendor,
            "model": served.model,
            "region": served.region,
            "routing": self.decision.reason(chosen=served) if self.decision else {},
            "ignored_params": list(served.ignored_params),
        }

    def infrai(self) -> dict[str, Any]:
        """The ``infrai`` object of the response."""
        served = self.served()
        cost = nanos_to_usd_str(self.cost_nanos)
        out: dict[str, Any] = {
            "cost_usd": float(cost),
            "cost_nanos": self.cost_nanos,
            "vendor": served["vendor"] or None,
            "model": served["model"] or None,
            "region": served["region"] or None,
            "cache": self.cache_hit,
            "request_id": self.request.request_id,
            "routing": served["routing"] or None,
            "ignored_params": served["ignored_params"],
            "failovers": self.failovers,
        }
        if self.usage_estimated:
            out["usage_estimated"] = True
        return out

    def headers(self, *, final: bool = True) -> dict[str, str]:
        """``X-Infrai-*`` and rate-limit headers. Streams (``final=False``) send the reserved
        maximum as ``X-Infrai-Max-Cost-Usd``; their cost is in the last chunk."""
        served = self.served()
        out = {**self.limit_headers}
        if served["vendor"]:
            out["x-infrai-vendor"] = served["vendor"]
            out["x-infrai-model"] = served["model"]
        if served["ignored_params"]:
            out["x-infrai-ignored-params"] = ",".join(served["ignored_params"])
        if self.cache_hit:
            out["x-infrai-cache"] = "hit"
        if final:
            out["x-infrai-cost-usd"] = nanos_to_usd_str(self.cost_nanos)
        else:
            out["x-infrai-max-cost-usd"] = nanos_to_usd_str(self.hold_nanos)
        return out

    async def finish(
        self,
        *,
        status: RequestStatus,
        http_status: int,
        error_code: str = "",
        error_message: str = "",
    ) -> None:
        """Write the request-log row and settle the hold together (exactly once; safe to call
        again). Runs on every exit path.

        The work runs in its own task, started before this coroutine first yields: cancelling
        the caller (the client left, even twice) cannot stop it; the caller still waits for it
        so that a client that reads the answer's end sees its ledger entry.

        When PostgreSQL cannot take the settlement (:func:`_record_and_settle` journals it
        instead), a non-streamed answer that costs something is not given away: the call is
        recorded as refused, nothing charged, and this raises the retryable 503 to answer
        instead. A stream's answer is already out: its charge waits in the journal.
        """
        if self.finished:
            return
        self.finished = True
        self.request.logged = True
        code = error_code or (self.note if status is RequestStatus.OK else "")
        row = self._log_row(status=status, http_status=http_status, error_code=code)
        row.error_message = error_message[:500]
        refusal = instead = None
        if status is RequestStatus.OK and not self.stream and self.cost_nanos > 0:
            refusal = ServiceUnavailable(
                "infrai could not record the charge of this request, so its answer was not "
                "released; nothing was charged. Retry the request.",
                code=outages.OUTAGE_CODE,
                headers={"retry-after": "1"},
            )
            instead = self._log_row(
                status=RequestStatus.UNAVAILABLE, http_status=503, error_code=refusal.code
            )
            instead.cost_nanos = 0
            instead.error_message = refusal.message
        observability.call_finished(row, self.request)
        job = asyncio.ensure_future(
            _record_and_settle(row, self.held, self.cost_nanos, instead=instead)
        )
        keep(job)
        job.add_done_callback(lambda _job: _inflight.discard(self))
        durable = await asyncio.shield(job)
        if not durable and refusal is not None:
            self.cost_nanos = 0
            raise refusal
        _push_live(row)

    def streaming(self, usage_so_far: Callable[[], Usage]) -> None:
        """Mark the call as streaming: if the process stops before the stream ends,
        :func:`settle_inflight_now` bills ``usage_so_far()`` (what was delivered)."""
        self.usage_so_far = usage_so_far

    def _log_row(self, *, status: RequestStatus, http_status: int, error_code: str) -> RequestLog:
        served = self.served()
        return RequestLog(
            request_id=self.request.request_id,
            organization_id=self.key.organization_id,
            project_id=self.key.project_id,
            api_key_id=self.key.key_id,
            endpoint=self.endpoint,
            requested_model=self.requested_model[:120],
            model=served["model"],
            vendor=served["vendor"],
            region=served["region"],
            status=status,
            http_status=http_status,
            error_code=error_code[:64],
            input_tokens=self.usage.input_tokens,
            cached_input_tokens=self.usage.cached_input_tokens,
            output_tokens=self.usage.output_tokens,
            usage_estimated=self.usage_estimated,
            usage_source=self.usage_source,
            cost_nanos=self.cost_nanos,
            latency_ms=(time.perf_counter_ns() - self.request.started_ns) // 1_000_000,
            ttft_ms=self.ttft_ms,
            stream=self.stream,
            cache_hit=self.cache_hit,
            failovers=self.failovers,
            routing=served["routing"],
            ignored_params=served["ignored_params"],
            prompt=self.prompt()[:20000] if self.key.log_prompts else "",
        )

    @asynccontextmanager
    async def closed_on_failure(self) -> AsyncIterator[None]:
        """Any failure inside the block closes the call — logged, settled with nothing charged,
        then re-raised: an :class:`ApiError` with its status, a cancellation (the client left)
        as 499, anything else as a 500."""
        try:
            yield
        except ApiError as exc:
            await self.fail(exc)
            raise
        except asyncio.CancelledError:
            self.charge(Usage())
            if not self.shutting_down:
                await self.finish(status=RequestStatus.CANCELLED, http_status=499)
                raise
            # The process is draining: the client gets a 503 it may retry elsewhere.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            stopped = ServiceUnavailable(
                "The server is restarting and ended this request before it was answered; "
                "nothing was charged. Retry the request.",
                code=SHUTTING_DOWN_CODE,
            )
            await self.fail(stopped)
            raise stopped from None
        except Exception as exc:
            refused = api_error(exc)  # a refusal of billing or the catalog: answered as such
            if refused is not None:
                await self.fail(refused)
                raise refused from exc
            await self.fail(outages.unavailable(exc) or internal_error())
            raise

    async def fail(self, exc: ApiError) -> None:
        """:meth:`finish` for a call that ends in ``exc`` (nothing delivered, nothing charged)."""
        status = RequestStatus.of_error(exc)
        self.charge(Usage())
        await self.finish(
            status=status, http_status=exc.status, error_code=exc.code, error_message=exc.message
        )


def _stopped_streams(
    loop: asyncio.AbstractEventLoop | None = None,
) -> list[tuple[RequestLog, bool, int]]:
    """Finish every stream still relayed here (of ``loop``'s server, when given) for what it
    delivered so far: the log row, whether it holds money, and its cost, to record and
    settle."""
    stopped = []
    for call in list(_inflight):
        if call.finished or call.usage_so_far is None:
            continue
        if loop is not None and (call.task is None or call.task.get_loop() is not loop):
            continue
        call.finished = True
        _inflight.discard(call)
        call.charge(call.usage_so_far(), estimated=True)
        row = call._log_row(
            status=RequestStatus.CANCELLED, http_status=499, error_code="server_shutdown"
        )
        stopped.append((row, call.held, call.cost_nanos))
    return stopped


async def _record_and_settle_stopped(stopped: list[tuple[RequestLog, bool, int]]) -> int:
    """Settle each stopped stream (journaled where the database cannot take it); returns how
    many are in PostgreSQL."""
    settled = 0
    for row, held, cost in stopped:
        settled += await _record_and_settle(row, held, cost)
    return settled


def settle_inflight_now() -> int:
    """Bill every stream this process is still relaying for what it delivered so far.

    The last resort at process exit (registered with :mod:`atexit` by the app) for calls that
    :func:`drain` did not end — a server without the drain (daphne drops open streams on
    SIGTERM without running their ``finally`` blocks). Synchronous: it runs the loop path's
    statements on an event loop of its own (call it where no loop is running); returns how
    many calls it settled.
    """
    stopped = _stopped_streams()
    if not stopped:
        return 0

    async def run() -> int:
        try:
            return await _record_and_settle_stopped(stopped)
        finally:
            await adb.close()

    return asyncio.run(run())


async def drain(*, grace_s: float) -> int:
    """Stop this process's calls for shutdown; returns how many had to be ended.

    New holds are refused at once (503 ``server_shutting_down``, which the SDKs retry). Calls
    in flight get ``grace_s`` seconds to finish; the rest are cancelled with
    ``shutting_down`` set — a stream then ends with an error event and ``[DONE]`` and is billed
    for what it delivered, a non-streamed call answers 503 and is charged nothing — and their
    settlement is awaited (bounded). A stream still open after that is billed for what it
    delivered, as :func:`settle_inflight_now` bills it.
    """
    loop = asyncio.get_running_loop()
    _draining.add(loop)

    def mine() -> list[Call]:
        return [c for c in _inflight if c.task is not None and c.task.get_loop() is loop]

    running = {call.task for call in mine() if call.task is not None and not call.task.done()}
    if running:
        await asyncio.wait(running, timeout=grace_s)
    ended = [call for call in mine() if not call.finished]
    for call in ended:
        call.shutting_down = True
        if call.task is not None:
            call.task.cancel()
    waiting = {c.task for c in ended if c.task is not None} | pending(loop)
    if waiting:
        await asyncio.wait(waiting, timeout=10.0)
    if pending(loop):
        await asyncio.wait(pending(loop), timeout=5.0)
    if mine():
        await _record_and_settle_stopped(_stopped_streams(loop))
    return len(ended)


async def close_clients() -> None:
    """Close this loop's vendor HTTP sessions and database pool (after :func:`drain`)."""
    await vendor_http.close()
    await image_fetch.close()
    await adb.close()


def _ensure_renewer() -> None:
    """Start this event loop's hold renewer once (one per loop: tests run several)."""
    loop = asyncio.get_running_loop()
    task = _renewers.get(loop)
    if task is None or task.done():
        _renewers[loop] = loop.create_task(_renew_holds())


def tick_s() -> float:
    """How often the renewer runs: often enough to renew within a third of the hold TTL and
    to checkpoint streams every ``INFRAI_CHECKPOINT_S``; at least every 5 s (the process's
    liveness), at most every 0.5 s."""
    ttl = float(settings.INFRAI_HOLD_TTL_S)
    return min(max(min(ttl / 3, float(settings.INFRAI_CHECKPOINT_S)), 0.5), 5.0)


async def _renew_holds() -> None:
    """On every tick (:func:`tick_s`), each step on its own: say this process is alive
    (:func:`billing.services.aprocess_seen`, what the audit tells a dead process's expired
    holds by), renew and checkpoint holds (:func:`renew_due`), replay the journal."""
    steps = (("heartbeat", aprocess_seen), ("renew holds", renew_due), ("replay", replay_journal))
    while True:
        await asyncio.sleep(tick_s())  # first: a call's own round trips stay its own
        for name, step in steps:
            try:
                await step()
            except Exception as exc:
                if not outages.noted(exc):
                    log.warning("could not %s", name, exc_info=True)


async def renew_due(*, now: float | None = None) -> int:
    """Renew the holds of this loop's unfinished calls that were last renewed a third of the
    hold TTL ago, so the sweeper only ever expires holds of dead processes, and checkpoint
    every stream last checkpointed ``INFRAI_CHECKPOINT_S`` ago: its hold records what it has
    delivered (:meth:`Call.delivered_nanos`), which an expiry charges. So a process killed
    mid-stream loses at most the last ``INFRAI_CHECKPOINT_S`` + one tick of each stream. One
    statement for all. Returns how many holds were renewed."""
    ttl = int(settings.INFRAI_HOLD_TTL_S)
    checkpoint = float(settings.INFRAI_CHECKPOINT_S)
    loop = asyncio.get_running_loop()
    at = time.monotonic() if now is None else now
    due = [
        call
        for call in list(_inflight)
        if call.held
        and not call.finished
        and call.task is not None
        and call.task.get_loop() is loop
        and (
            at - call.renewed_at >= ttl / 3
            or (call.usage_so_far is not None and at - call.checkpointed_at >= checkpoint)
        )
    ]
    if not due:
        return 0
    renewed = await aholds_renew(
        request_ids=[c.request.request_id for c in due],
        ttl_s=ttl,
        delivered=[c.delivered_nanos() for c in due],
    )
    for call in due:
        call.renewed_at = call.checkpointed_at = at
    return int(renewed)


def _clean_text(value: Any) -> Any:
    """``value`` with every string made storable by PostgreSQL (no NUL, no lone surrogates),
    recursively through lists and dicts."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [_clean_text(v) for v in value]
    if isinstance(value, dict):
        return {_clean_text(k): _clean_text(v) for k, v in value.items()}
    return value


_TEXT_FIELDS = (
    "requested_model",
    "model",
    "vendor",
    "region",
    "error_code",
    "error_message",
    "prompt",
)


def _clean_row(row: RequestLog) -> None:
    for name in _TEXT_FIELDS:
        setattr(row, name, _clean_text(getattr(row, name)))
    row.routing = _clean_text(row.routing)
    row.ignored_params = _clean_text(row.ignored_params)


def _settle_description(row: RequestLog) -> str:
    return f"{row.endpoint} {row.model}".strip()


_LOG_FIELDS = tuple(f for f in RequestLog._meta.concrete_fields if not f.primary_key)
# The row of a call. A row already there is kept — the same row committed by an attempt whose
# answer was lost — unless it is the ``abandoned`` row the sweeper wrote for a call whose
# settlement was still in this process's journal: the real row replaces it.
_LOG_INSERT = """INSERT INTO {table} ({columns}) VALUES ({values})
ON CONFLICT (request_id) DO UPDATE SET ({columns}) = ROW({excluded})
WHERE {table}.status = '{abandoned}'""".format(
    table=RequestLog._meta.db_table,
    columns=", ".join(str(f.column) for f in _LOG_FIELDS),
    values=", ".join(f"%(log_{f.attname})s" for f in _LOG_FIELDS),
    excluded=", ".join(f"EXCLUDED.{f.column}" for f in _LOG_FIELDS),
    abandoned=RequestStatus.ABANDONED.value,
)
_LOG_INSERT_ASYNC = adb.Statement.compile(_LOG_INSERT)
_LOG_ATTNAMES = tuple(
    (f"log_{f.attname}", f.attname, isinstance(f, models.JSONField)) for f in _LOG_FIELDS
)


def _log_values(row: RequestLog) -> dict[str, Any]:
    """``row``'s column values for :data:`_LOG_INSERT` (JSON columns as JSON text)."""
    return {
        param: adb.json_text(getattr(row, attname)) if is_json else getattr(row, attname)
        for param, attname, is_json in _LOG_ATTNAMES
    }


async def _settle(
    conn: asyncpg.Connection,
    row: RequestLog,
    cost: int,
    before: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Settle ``row``'s hold on ``conn`` (``before``: written by the same statement) and ask for
    an auto-recharge or a low-balance e-mail the settlement made due."""
    settled = await asettle(
        conn,
        request_id=row.request_id,
        actual_nanos=cost,
        description=_settle_description(row),
        before=before,
    )
    if settled is not None and settled.recharge_wallet_id is not None:
        spawn(arequest_recharge(settled.recharge_wallet_id))
    if settled is not None and settled.low_balance_wallet_id is not None:
        spawn(arequest_low_balance(settled.low_balance_wallet_id))


async def _write(conn: asyncpg.Connection, row: RequestLog, held: bool, cost: int) -> None:
    """The request-log row and the settlement in ONE statement on ``conn``
    (:func:`billing.services.asettle` runs the row's INSERT inside its own statement), so both
    commit together; without a hold, the row alone. A hold the sweeper already expired (a
    process stalled past the hold TTL) is settled late by the same statement. Repeating it
    changes nothing (a hold is claimed once; :data:`_LOG_INSERT` keeps a row already there).

    If the row cannot be written even after cleaning, that statement wrote nothing: the hold is
    then settled alone (money first) and a minimal row — no routing, no prompt,
    ``log_write_failed`` — is written; if even that is refused, the settlement stands and the
    audit reports its entry without a log. Raises only a lost connection (the caller retries
    elsewhere) or a settlement the database refused.
    """
    _clean_row(row)
    try:
        if held:
            await _settle(conn, row, cost, before=(_LOG_INSERT, _log_values(row)))
        else:
            await adb.execute(conn, _LOG_INSERT_ASYNC, _log_values(row))
        return
    except Exception as exc:
        if adb.lost(exc):
            raise
        log.exception("could not write the request log of %s; settling alone", row.request_id)
    row.routing, row.ignored_params, row.prompt = {}, [], ""
    row.error_code = "log_write_failed"
    row.requested_model = row.requested_model.encode("ascii", "ignore").decode()
    if held:
        await _settle(conn, row, cost)
    try:
        await adb.execute(conn, _LOG_INSERT_ASYNC, _log_values(row))
    except Exception as exc:
        if adb.lost(exc):
            raise
        log.exception("could not write even the minimal request log of %s", row.request_id)


async def _record_and_settle_on_loop(row: RequestLog, held: bool, cost: int) -> None:
    """:func:`_write` on a connection known to be alive: a lost connection is retried on a
    fresh one of its own (never the next pooled one, which a reset has usually ended too), with
    backoff, for ``INFRAI_SETTLE_RETRY_S``; then the last error is raised."""
    deadline = time.monotonic() + float(settings.INFRAI_SETTLE_RETRY_S)
    delay, fresh = 0.05, False
    while True:
        try:
            async with adb.fresh_connection() if fresh else adb.connection() as conn:
                await _write(conn, row, held, cost)
            return
        except Exception as exc:
            if not adb.lost(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay, fresh = min(delay * 2, 0.5), True


def _intent(row: RequestLog, held: bool, cost: int) -> journal.Intent:
    return journal.Intent(
        row={attname: getattr(row, attname) for _param, attname, _json in _LOG_ATTNAMES},
        held=held,
        cost=cost,
    )


async def _replay(intent: journal.Intent) -> None:
    """Make one journaled settlement (one attempt; the journal tries again on its next tick)."""
    row = RequestLog(**intent.row)
    async with adb.connection() as conn:
        await _write(conn, row, intent.held, intent.cost)


@observability.traced("infrai.settle")
async def _record_and_settle(
    row: RequestLog,
    held: bool,
    cost: int,
    *,
    instead: RequestLog | None = None,
) -> bool:
    """Record and settle the call (:func:`_record_and_settle_on_loop`); True once that is in
    PostgreSQL. When the database cannot take it, the settlement goes to this process's journal
    (:mod:`billing.journal`, replayed until PostgreSQL accepts it) and this returns False —
    ``instead`` (the row of a call whose answer is then refused: cost 0) journaled in its place
    when given."""
    try:
        await _record_and_settle_on_loop(row, held, cost)
        return True
    except Exception as exc:
        if not adb.lost(exc):
            # Not an outage: a settlement the database refuses would be refused on every
            # replay too. The hold expires; the audit reports it (expired_alive).
            log.exception("could not settle %s", row.request_id)
            return False
        outages.noted(exc)
    if instead is not None:
        row, cost = instead, 0
    try:
        await journal.append(_intent(row, held, cost))
    except OSError:
        # Neither the database nor the disk: the hold expires, the sweeper logs the call and
        # the audit reports its hold as expired while this process was alive.
        log.exception("could not journal the settlement of %s", row.request_id)
    return False


async def replay_journal(*, orphans: bool = False) -> int:
    """Make the settlements waiting in this process's journal (and, with ``orphans``, those of
    this host's processes that are gone); returns how many are still waiting."""
    return await journal.replay(_replay, orphans=orphans)


def _log_unheld_failure(request: ApiRequest, exc: ApiError) -> None:
    """The request-log row of an authenticated call that failed before it held money (a 400,
    404, 429, 402 …): written off the response path, nothing to settle."""
    key = request.caller
    row = RequestLog(
        request_id=request.request_id,
        organization_id=key.organization_id,
        project_id=key.project_id,
        api_key_id=key.key_id,
        endpoint=request.path.removeprefix("/v1/").replace("/", ".")[:40],
        requested_model=request.requested_model[:120],
        status=RequestStatus.of_error(exc),
        http_status=exc.status,
        error_code=exc.code[:64],
        error_message=exc.message[:500],
        latency_ms=(time.perf_counter_ns() - request.started_ns) // 1_000_000,
    )
    observability.call_finished(row, request)
    spawn(_record_and_settle(row, False, 0))
    _push_live(row)


on_unlogged_failure(_log_unheld_failure)


def _announce(organization_id: int, payload: Callable[[], dict[str, Any]]) -> None:
    """Push ``payload()`` to the organization's open dashboard pages after the response (best
    effort: :func:`infra.live.asend` logs and swallows its own failures) — no task at all
    while this process knows none is open."""
    if not live.known_unwatched(organization_id):
        spawn(live.asend(organization_id, payload()))


def _push_live(row: RequestLog) -> None:
    """Announce the recorded call to the organization's open pages."""
    _announce(
        row.organization_id,
        lambda: live.usage_event(
            request_id=row.request_id,
            model=row.model,
            vendor=row.vendor,
            status=row.status,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost_nanos=row.cost_nanos,
            latency_ms=row.latency_ms,
            project_id=row.project_id,
            api_key_id=row.api_key_id,
        ),
    )
