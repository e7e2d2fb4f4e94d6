"""The one metered relay: every streamed answer (chat, Responses, speech) goes through it.

:func:`relay` owns the loop a stream shares whatever it carries: read the vendor's items,
render each for the client through a :class:`Meter`, and on **every** exit settle the call
exactly once for what was delivered:

- the vendor ends normally → bill the vendor's usage where it is plausible against what was
  relayed, else our count (:func:`inference.usage.reconcile`), settle, then send the meter's
  tail (the chunk carrying ``infrai``, ``[DONE]``);
- what was relayed passes the call's output cap with slack (the meter raises
  :class:`OutputCapReached`; :func:`inference.usage.stream_cut_tokens`) → stop reading, bill
  our count capped at the cap, settle, then send the tail, which ends the answer as the cap
  does (``finish_reason: "length"``) — a success, not an error;
- the vendor breaks or sends garbage after the first byte (a :class:`VendorError`, a chunk
  that is not an object, an error chunk, anything the meter refuses, any exception of the
  adapter) → bill what was delivered, settle, then send an OpenAI-shaped error and ``[DONE]``;
  a vendor that delivered a complete answer (every choice finished) and only forgot
  ``[DONE]`` is billed on its usage as a success;
- the stream outlives ``INFRAI_MAX_STREAM_S`` → ended like a broken vendor (``stream_too_long``);
- the process drains for shutdown (:func:`inference.settlement.drain` cancels the task) → bill
  what was delivered, settle, send the error tail (``server_shutting_down``);
- the client leaves (the task is cancelled) → bill what was delivered; settlement is shielded
  from the cancellation (:func:`inference.settlement.finish`).

Settlement happens *before* the tail, so a client that reads the last event sees its ledger
entry. The upstream is closed (cancelling the vendor request) on every exit.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from inference import render, settlement, stages
from inference.call import Call
from inference.http import StreamingResponse
from inference.models import RequestStatus
from inference.usage import Billed
from inference.vendors.errors import VendorError
from infra import observability


class Outcome(enum.Enum):
    """How a stream ended, as far as billing cares."""

    COMPLETE = "complete"  # the vendor ended it normally
    FAULT = "fault"  # the vendor broke, sent garbage, or the stream was cut by us
    CANCELLED = "cancelled"  # the client left (or the process stopped)


class MalformedChunk(ValueError):
    """A vendor item the meter cannot relay (not an object, an error chunk, bad fields)."""


class OutputCapReached(Exception):
    """Raised by :meth:`Meter.feed` when what was delivered passed the call's output cap (with
    slack): the relay sends ``rendered`` (the item's bytes), stops reading the vendor and ends
    the stream as complete; the meter bills and ends it as cut at the cap."""

    def __init__(self, rendered: list[bytes]) -> None:
        super().__init__("the stream passed its output cap")
        self.rendered = rendered


@dataclass(frozen=True, slots=True)
class Fault:
    """Why a stream ended early: the request log's error code and the client's message."""

    code: str
    message: str
    status: RequestStatus = RequestStatus.VENDOR_ERROR


def vendor_fault(detail: str) -> Fault:
    return Fault(
        "vendor_stream_interrupted",
        f"The vendor's stream broke after the response started ({detail}); you were billed "
        "for what was delivered.",
    )


TOO_LONG = Fault(
    "stream_too_long",
    "The stream exceeded the maximum stream duration; you were billed for what was delivered.",
)
SHUTDOWN = Fault(
    "server_shutting_down",
    "The server is restarting and ended this stream; you were billed for what was delivered. "
    "Retry the request.",
    RequestStatus.CANCELLED,
)


class Meter(Protocol):
    """What one kind of stream does with the vendor's items (see the module docstring)."""

    def start(self) -> Iterable[bytes]:
        """Bytes to send before the first item."""

    def feed(self, item: Any) -> Iterable[bytes]:
        """Render one vendor item; raise :class:`MalformedChunk` for garbage, or
        :class:`OutputCapReached` once past the output cap."""

    def complete(self) -> bool:
        """Whether what was delivered is a whole answer (a missing ``[DONE]`` then is benign)."""

    def usage(self, outcome: Outcome) -> Billed:
        """What to bill for ``outcome``; its ``note`` goes to the log of a call that ended
        well."""

    def tail(self, call: Call, fault: Fault | None) -> Iterable[bytes]:
        """The bytes after settlement (``render.infrai(call)`` is final by then)."""


async def relay(
    call: Call,
    items: AsyncIterator[Any],
    meter: Meter,
    close_upstream: Callable[[], Awaitable[None]],
) -> AsyncIterator[bytes]:
    """Relay ``items`` through ``meter`` and settle ``call`` exactly once (module docstring)."""
    outcome, fault = Outcome.CANCELLED, None
    call.streaming(lambda: meter.usage(Outcome.CANCELLED)[0])
    deadline = time.monotonic() + float(settings.INFRAI_MAX_STREAM_S)
    try:
        for data in meter.start():
            yield data
        while True:
            try:
                item = await items.__anext__()
            except StopAsyncIteration:
                outcome = Outcome.COMPLETE
                break
            except VendorError as exc:
                fault = None if meter.complete() else vendor_fault(exc.kind)
                break
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # an adapter that choked on what the vendor sent
                fault = vendor_fault(f"malformed stream: {type(exc).__name__}")
                break
            try:
                rendered = list(meter.feed(item))
            except MalformedChunk as exc:
                fault = vendor_fault(str(exc))
                break
            except OutputCapReached as cap:
                for data in cap.rendered:
                    yield data
                break
            for data in rendered:
                yield data
            if time.monotonic() > deadline:
                fault = TOO_LONG
                break
        if fault is None:
            outcome = Outcome.COMPLETE
        else:
            outcome = Outcome.FAULT
            if fault is not TOO_LONG:
                stages.vendor_failed_midway(call)
        await _settle(call, meter, outcome, fault, close_upstream)
        for data in meter.tail(call, fault):
            yield data
    except asyncio.CancelledError:
        if not call.shutting_down or call.finished:
            raise
        # The process is draining: end the stream cleanly and bill what was delivered.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        outcome, fault = Outcome.CANCELLED, SHUTDOWN
        await _settle(call, meter, outcome, fault, close_upstream)
        for data in meter.tail(call, fault):
            yield data
    finally:
        await close_upstream()
        if not call.finished:
            await _settle(call, meter, Outcome.CANCELLED, None, close_upstream)


async def _settle(
    call: Call,
    meter: Meter,
    outcome: Outcome,
    fault: Fault | None,
    close_upstream: Callable[[], Awaitable[None]],
) -> None:
    billed = meter.usage(outcome)
    observability.stream_ended(call.request, meter)
    call.bill(billed)
    if outcome is Outcome.CANCELLED and fault is None:
        status, code = RequestStatus.CANCELLED, "client_disconnected"
    elif fault is not None:
        status, code = fault.status, fault.code
    else:
        status, code = RequestStatus.OK, billed.note
    await close_upstream()
    await settlement.finish(call, status=status, http_status=200, error_code=code)


def respond(
    call: Call,
    first: Any,
    upstream: AsyncGenerator[Any, None],
    meter: Meter,
    *,
    then: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
) -> StreamingResponse:
    """The streamed answer of ``call``: ``first`` and the rest of ``upstream`` relayed through
    ``meter`` (:func:`relay`; ``then`` wraps the relayed bytes, e.g. to store them), with the
    headers of a stream. A response that ends before the relay started (the client left before
    the first byte) still closes the upstream and settles what was delivered, as a 499."""

    async def on_close() -> None:
        await upstream.aclose()
        if not call.finished:
            call.charge(meter.usage(Outcome.CANCELLED)[0], estimated=True)
            await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)

    chunks = relay(call, prepend(first, upstream), meter, upstream.aclose)
    if then is not None:
        chunks = then(chunks)
    return StreamingResponse(
        chunks, headers=render.stream_headers(call, final=False), on_close=on_close
    )


class prepend:
    """``first``, then the items of ``rest`` (no generator frame per item on the hot path)."""

    def __init__(self, first: Any, rest: AsyncIterator[Any]) -> None:
        self._first = [first]
        self._rest = rest

    def __aiter__(self) -> prepend:
        return self

    async def __anext__(self) -> Any:
        if self._first:
            return self._first.pop()
        return await self._rest.__anext__()
