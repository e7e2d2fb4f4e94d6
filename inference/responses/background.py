"""Background responses (``background: true``): held at submission, generated in the web
process, settled once, polled, replayed and cancelled.

:func:`submit` takes the hold (``stages.hold``) of a call already validated, routed and
admitted, stores its ``queued`` response and starts its generation; the answer is that response
(or, with ``stream``, :func:`replay` of its events from the start). The generation runs in an
asyncio task of this web process, carried by the server's :class:`~inference.floor.Floor` like
any call holding money (its hold renewed and checkpointed; ended and billed by a draining
server): it streams from the vendor through the one metered relay, so it is settled once, for
what was generated, however it ends, and its stored response moves ``queued`` →
``in_progress`` → ``completed`` / ``incomplete`` / ``failed`` / ``cancelled``. An asyncio task,
not Celery: the relay, its meter, the hold's renewal and the drain all live on the web process's
loop, and a worker would need a second, synchronous path to the same money.

Cancelling (:func:`stop`): the process that generates it is told through the stored row's
``cancel_requested`` (it looks every :data:`CANCEL_POLL_S`; at once when it is the process that
was asked); the relay bills what was generated and releases the rest of the hold, and the
stored response becomes ``cancelled`` with its partial output. Its events are kept in Redis
(:func:`inference.responses.store.events_append`) so that any process can :func:`replay` them
after a sequence number, then the rest as they are generated; a client that leaves a replay
stops nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

from accounts.auth import KeyContext
from config.errors import ApiError, internal_error
from inference import relay, render, settlement, stages
from inference.call import Call
from inference.chat.leg import CHAT_LEG, open_upstream_stream
from inference.floor import Floor
from inference.http import Response, StreamingResponse, json_response
from inference.models import RequestStatus, ResponseStatus
from inference.responses import store
from inference.responses.meter import ResponsesMeter
from inference.responses.translate import ResponsesRequest, StreamTranslator
from inference.vendors.base import JSON
from infra import outages
from infra.background import keep, spawn
from money.pricing import Usage

log = logging.getLogger(__name__)

# How often a background generation looks for a cancellation made through another process.
CANCEL_POLL_S = 1.0
# How often a replay of a background response's events looks for new ones.
REPLAY_POLL_S = 0.1
# How long ``stop`` waits for the generation to stop and store its ``cancelled`` response.
CANCEL_WAIT_S = 10.0


async def submit(
    call: Call, parsed: ResponsesRequest, *, context: list[JSON], input_items: list[JSON]
) -> Response | StreamingResponse:
    """Hold, store the ``queued`` response and start its generation (module docstring); the
    answer is that response, or with ``stream`` its events as they are generated."""
    chat = parsed.chat
    await stages.hold(call, lambda candidate: CHAT_LEG.worst_case(chat, candidate))
    assert call.decision is not None
    translator = StreamTranslator(
        response_id=store.response_id_of(call.request_id),
        model=call.decision.candidates[0].model if call.decision.candidates else chat.model,
        echo=parsed.echo,
    )
    queued = translator.snapshot(ResponseStatus.QUEUED.value)
    async with stages.closed_on_failure(call):  # not stored: released, and the error answered
        await store.create(
            key=call.key,
            request_id=call.request_id,
            body=queued,
            context=context,
            input_items=input_items,
            background=True,
        )
    task = asyncio.get_running_loop().create_task(_generate(call, parsed, translator))
    keep(task)
    task.add_done_callback(lambda done: _never_ran(call, done))
    call.task = task  # what a draining server cancels (inference.settlement.drain)
    if chat.stream:
        return StreamingResponse(
            replay(call.key, translator.response_id, -1),
            headers=render.stream_headers(call, final=False),
        )
    return json_response(queued, headers=render.headers(call, final=False))


def _never_ran(call: Call, task: asyncio.Task[None]) -> None:
    """A generation task cancelled before it started (a drain at that instant) ran none of its
    code: release its hold."""
    if task.cancelled() and not call.finished:
        call.charge(Usage())
        spawn(settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499))


async def _generate(call: Call, parsed: ResponsesRequest, translator: StreamTranslator) -> None:
    """Run a background response to its end and store how it ended; settled exactly once on
    every exit (the relay, :func:`inference.stages.closed_on_failure`, or here)."""
    state = call.request.state
    state["started"] = True
    me = asyncio.current_task()
    assert me is not None
    watcher = keep(asyncio.ensure_future(_watch_cancel(translator.response_id, me)))
    try:
        if state.get("cancel"):
            raise asyncio.CancelledError
        body = await _run(call, parsed, translator)
    except asyncio.CancelledError:
        me.uncancel()
        body = translator.final or _with_infrai(call, translator.snapshot("cancelled", call.usage))
    except Exception:
        log.exception("background response %s failed", translator.response_id)
        body = _failed(call, translator, internal_error())
    finally:
        watcher.cancel()
        if not call.finished:  # cancelled (or broken) before the vendor was called
            call.charge(Usage())
            await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)
    try:
        await store.update(body)
    except Exception:
        log.warning("could not store the end of %s", translator.response_id, exc_info=True)


async def _run(call: Call, parsed: ResponsesRequest, translator: StreamTranslator) -> JSON:
    """The generation: ``in_progress``, the vendor's stream through the relay; the response as
    it ended (``completed``, ``incomplete`` or ``failed``)."""
    await store.update(translator.snapshot(ResponseStatus.IN_PROGRESS.value))
    try:
        async with stages.closed_on_failure(call):
            upstream, first = await open_upstream_stream(call, parsed.chat)
    except ApiError as exc:
        return _failed(call, translator, exc)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    translator.model = call.answer.model
    meter = ResponsesMeter(call, parsed.chat, translator)
    events = relay.relay(call, relay.prepend(first, upstream), meter, upstream.aclose)
    try:
        async for event in events:
            await _record(translator.response_id, event)
    finally:  # cancelled while recording: the relay settles as it closes
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    return translator.final or _failed(call, translator, internal_error())


async def _record(response_id: str, event: bytes) -> None:
    """Keep ``event`` for replay; a Redis outage loses the replay, never the generation."""
    try:
        await store.events_append(response_id, [event])
    except Exception as exc:
        if not outages.noted(exc):
            log.warning("could not keep an event of %s", response_id, exc_info=True)


async def replay(key: KeyContext, response_id: str, after: int) -> AsyncIterator[bytes]:
    """The events of the background response ``response_id`` after sequence number ``after``,
    then the rest as they are generated, until its final event (or, for one that ended without
    one — cancelled, failed before the vendor answered — its end)."""
    deadline = time.monotonic() + float(settings.INFRAI_MAX_STREAM_S)
    while time.monotonic() < deadline:
        events = await store.events_after(response_id, after)
        for event in events:
            yield event
            if store.is_final_event(event):
                return
        after += len(events)
        if events:
            continue
        found = await store.find(key=key, response_id=response_id)
        if found is None or found.status not in store.RUNNING:
            for event in await store.events_after(response_id, after):  # appended meanwhile
                yield event
            return
        await asyncio.sleep(REPLAY_POLL_S)


def _with_infrai(call: Call, body: JSON) -> JSON:
    return {**body, "infrai": render.infrai(call)}


def _failed(call: Call, translator: StreamTranslator, exc: ApiError) -> JSON:
    """The ``failed`` response of a generation that ended in ``exc``."""
    error = {"code": exc.code, "message": exc.message}
    return _with_infrai(call, translator.snapshot("failed", call.usage, error=error))


async def _watch_cancel(response_id: str, task: asyncio.Task[None]) -> None:
    """Cancel ``task`` once the stored response asks for it (a ``cancel`` or ``DELETE`` made
    through any process): looked up every :data:`CANCEL_POLL_S`."""
    while True:
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            stop = await store.cancel_requested(response_id)
        except Exception:
            continue  # the database is away: the generation goes on, settled as usual
        if stop:
            if not task.cancelling():
                task.cancel()
            return


def _stop_here(floor: Floor[Call] | None, response_id: str) -> asyncio.Task[Any] | None:
    """Stop the generation of ``response_id`` if this server runs it; its task, or None."""
    wanted = store.request_id_of(response_id)
    for carried in list(floor.calls) if floor is not None else []:
        if carried.request_id != wanted or carried.task is None or carried.task.done():
            continue
        if not carried.request.state.get("started"):
            carried.request.state["cancel"] = True
        elif not carried.task.cancelling():
            carried.task.cancel()
        return carried.task
    return None


async def stop(floor: Floor[Call] | None, key: KeyContext, response_id: str) -> None:
    """Stop the generation of the background response ``response_id``, whose cancellation was
    asked for (:func:`inference.responses.store.request_cancel`), and return once it has
    stopped and stored its end (at most :data:`CANCEL_WAIT_S`): at once when ``floor`` (this
    server's) runs it, else when the process that runs it sees the flag."""
    task = _stop_here(floor, response_id)
    if task is not None:
        await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
        return
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        found = await store.find(key=key, response_id=response_id)
        if found is None or found.status not in store.RUNNING:
            return
        await asyncio.sleep(REPLAY_POLL_S)


def stop_soon(floor: Floor[Call] | None, response_id: str) -> None:
    """Stop the generation of ``response_id`` if ``floor`` runs it (a deleted response; the
    process that runs it elsewhere sees its row gone)."""
    _stop_here(floor, response_id)
