"""One metered call: what it is (:class:`CallContext`, immutable) and what became of it
(:class:`Call`, the record the stages of :mod:`inference.stages` fill in order).

The stages, top to bottom, each filling its part of the record: route → ``decision``; admit
→ the confirmed key in ``ctx`` and ``limit_headers``; hold → ``hold_nanos``/``held``; call
the vendor → ``served_by``, ``answer``, ``failovers``; bill → ``usage``, ``cost_nanos``; settle
→ ``finished``. Renderers (:mod:`inference.render`) only read it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accounts.auth import KeyContext
from catalog.routing import Candidate, RoutingDecision
from inference.floor import Floor
from inference.http import ApiRequest
from inference.models import UsageSource
from inference.usage import Billed
from infra import observability
from money.pricing import Usage, cost_nanos


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who asks for what: fixed once the endpoint has parsed the request. Admission replaces
    it once, with the key's confirmed context (:func:`inference.stages.admit`)."""

    request_id: str
    started_ns: int
    endpoint: str
    requested_model: str
    stream: bool
    key: KeyContext


@dataclass(frozen=True, slots=True)
class Served:
    """Who answered: vendor, model, region, the routing reason and the ignored parameters —
    made once per call (the response, its headers and the request log all read it)."""

    vendor: str = ""
    model: str = ""
    region: str = ""
    routing: dict[str, Any] = field(default_factory=dict)
    ignored_params: tuple[str, ...] = ()

    @classmethod
    def by(cls, candidate: Candidate, decision: RoutingDecision | None) -> Served:
        """``candidate`` of ``decision`` answered."""
        return cls(
            vendor=candidate.vendor,
            model=candidate.model,
            region=candidate.region,
            routing=decision.reason(chosen=candidate) if decision else {},
            ignored_params=tuple(candidate.ignored_params),
        )

    @classmethod
    def of_entry(cls, entry: dict[str, Any]) -> Served:
        """Who served a cache entry (the hit reports the original vendor)."""
        return cls(
            vendor=entry.get("vendor", ""),
            model=entry.get("model", ""),
            region=entry.get("region", ""),
            routing=entry.get("routing") or {},
            ignored_params=tuple(entry.get("ignored_params") or ()),
        )

    def entry(self) -> dict[str, Any]:
        """The fields a cache entry keeps (:meth:`of_entry` reads them back)."""
        return {**dataclasses.asdict(self), "ignored_params": list(self.ignored_params)}


NOBODY = Served()


@dataclass(eq=False)
class Call:
    """The record of one metered call (see the module docstring)."""

    request: ApiRequest
    ctx: CallContext
    floor: Floor[Call]
    limit_headers: dict[str, str] = field(default_factory=dict)
    decision: RoutingDecision | None = None
    served_by: Candidate | None = None
    answer: Served = NOBODY
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
    usage_so_far: Callable[[], Usage] | None = None  # set while streaming (shutdown billing)
    task: asyncio.Task[Any] | None = None  # the request's task (drain cancels it)
    shutting_down: bool = False  # set by drain before it cancels ``task``
    renewed_at: float = field(default_factory=time.monotonic)  # the hold's last (re)start
    checkpointed_at: float = field(default_factory=time.monotonic)  # its last checkpoint
    note: str = ""  # the log's code for a successful call with a caveat (vendor_usage_invalid)
    # The request fields the dialect accepted and does not forward to a candidate
    # (``/v1/messages``' ``thinking`` … for a chat vendor): reported with the model's ignored
    # parameters when that candidate serves the call.
    unforwarded: Callable[[Candidate], tuple[str, ...]] = lambda _candidate: ()

    @classmethod
    def open(
        cls, request: ApiRequest, *, endpoint: str, requested_model: str, stream: bool = False
    ) -> Call:
        """The record of ``request``'s call to ``endpoint`` (authenticated: its key is known),
        on the floor of the server that received it."""
        request.requested_model = requested_model
        ctx = CallContext(
            request_id=request.request_id,
            started_ns=request.started_ns,
            endpoint=endpoint,
            requested_model=requested_model,
            stream=stream,
            key=request.caller,
        )
        floor = request.floor if isinstance(request.floor, Floor) else Floor[Call]()
        return cls(request=request, ctx=ctx, floor=floor)

    @property
    def key(self) -> KeyContext:
        return self.ctx.key

    @property
    def request_id(self) -> str:
        return self.ctx.request_id

    @property
    def stream(self) -> bool:
        return self.ctx.stream

    def serve(self, candidate: Candidate) -> None:
        """``candidate`` answers (or refused the request itself): record who."""
        self.served_by = candidate
        served = Served.by(candidate, self.decision)
        unforwarded = self.unforwarded(candidate)
        if unforwarded:
            ignored = tuple(sorted({*served.ignored_params, *unforwarded}))
            served = dataclasses.replace(served, ignored_params=ignored)
        self.answer = served

    # --- billing: what the usage costs ----------------------------------------------------
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

    def streaming(self, usage_so_far: Callable[[], Usage]) -> None:
        """Mark the call as streaming: if the server stops before the stream ends, it is
        billed ``usage_so_far()`` (what was delivered)."""
        self.usage_so_far = usage_so_far
