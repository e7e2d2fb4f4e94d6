"""``/v1/responses``: the Responses API over chat-capable models, stored and in the background.

``POST /v1/responses``: validate (the chat rules, :mod:`inference.responses.translate`) → limit
→ route (the chat request's capabilities plus ``responses``) → hold (prompt bound +
``max_output_tokens`` or the platform cap) → call the vendor's chat API with failover → settle
→ store → a ``response`` object. Streams relay the vendor's chat chunks as Responses events as
they arrive; the relay settles for what was delivered on every exit (end, vendor failure after
the first event, disconnect) before its last event, and a vendor failure mid-stream ends with
``response.failed``, never a fake success.

Stored responses (:mod:`inference.responses.store`): ``store`` defaults to true, as in
OpenAI's API. A stored response is written after the call's settlement and before its answer
(or a stream's last event) leaves, so ``previous_response_id`` works on the very next call, on
any model. A call continuing one (``previous_response_id``) has that conversation — its context,
input and output — before its own input, in the prompt: held, counted and billed as input. An
unknown id, or another project's, is a 404 naming ``previous_response_id`` before any hold. An
organization with zero retention (``Organization.response_retention_days`` 0) keeps none:
nothing is stored (``store`` is reported false), and ``previous_response_id`` and
``background`` are refused with a 400 saying so. ``GET /v1/responses/{id}``, ``DELETE
/v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read and delete them
(project-scoped; free calls: counted against the key's limits and in the request log, nothing
held or charged).

Background responses (``background: true``, which needs ``store``; :mod:`inference.responses.
background`): validated, routed, admitted and held at submission, answered ``queued`` at once
(or, with ``stream``, with its events as they are generated), generated in this web process,
settled once for what was generated. ``POST /v1/responses/{id}/cancel`` stops one (billed for
what was generated, the rest of the hold released; only background responses can be
cancelled, 400 otherwise, as OpenAI); ``GET /v1/responses/{id}?stream=true&starting_after=N``
replays its events after sequence number ``N``, then the rest as they are generated.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from catalog.errors import RoutingError
from config.errors import ApiError, InvalidRequest, NotFound
from inference import relay, render, response_cache, settlement, stages
from inference.call import Call
from inference.chat.leg import (
    CHAT_LEG,
    cached_answer,
    completion_chunks,
    open_upstream_stream,
    route_and_limit,
    usage_from,
)
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus, ResponseStatus
from inference.responses import background, store
from inference.responses.meter import ResponsesMeter
from inference.responses.translate import (
    ResponsesRequest,
    StreamTranslator,
    input_items,
    output_items,
    parse_responses_request,
    response_object,
    responses_param,
    stateful_fields,
)
from inference.vendors.base import JSON
from infra.background import spawn
from money.pricing import Usage

log = logging.getLogger(__name__)

ENDPOINT = "responses"
ZERO_RETENTION = (
    "This organization keeps no stored responses (zero retention), so "
    "{what}. Send the whole conversation in 'input' instead, or ask its administrators for a "
    "retention of stored responses."
)


def _response_id(call: Call) -> str:
    return store.response_id_of(call.request_id)


@dataclass(frozen=True, slots=True)
class Keeping:
    """What a stored response keeps besides its body: the conversation before this call's
    input (the previous response's, flattened) and this call's input items."""

    context: list[JSON]
    input_items: list[JSON]


# --- POST /v1/responses -------------------------------------------------------------------------
async def responses(request: ApiRequest) -> Response | StreamingResponse:
    """The endpoint. See the module docstring."""
    data = request.json()
    parsed, keeping = await _parse(request, data)
    chat = parsed.chat
    call = Call.open(
        request,
        endpoint=ENDPOINT,
        requested_model=chat.model,
        stream=chat.stream or parsed.background,
    )
    call.prompt = lambda: str(chat.payload["messages"])
    call.unforwarded = lambda _candidate: parsed.ignored
    try:  # routing first: a request no model can take is a 400 (param as Responses names it)
        await route_and_limit(call, chat)
    except (ApiError, RoutingError) as exc:
        exc.param = responses_param(exc.param)
        raise
    if parsed.background:
        assert keeping is not None
        return await background.submit(
            call, parsed, context=keeping.context, input_items=keeping.input_items
        )
    key, hit = await cached_answer(call, chat)
    if hit is not None:
        return await _answer_from_cache(call, parsed, hit, keeping)
    await stages.hold(call, lambda candidate: CHAT_LEG.worst_case(chat, candidate))
    if chat.stream:
        return await _open_stream(call, parsed, keeping)
    leader = None if key is None else response_cache.lead(key)
    try:
        body = await stages.settle_leg(call, CHAT_LEG, chat)
        if key is not None and leader is not None and not call.usage_estimated:
            cached = {**body, "id": "cached", "model": call.answer.model}
            entry = {"body": cached, **call.answer.entry()}
            leader.done(entry)
            spawn(leader.store(entry))
    finally:
        if leader is not None:
            leader.close()
    out = _object(call, parsed, body)
    await _keep(call, keeping, out)
    return json_response(out, headers=render.headers(call))


async def _parse(request: ApiRequest, data: JSON) -> tuple[ResponsesRequest, Keeping | None]:
    """The validated request and what to store of it (None: nothing is stored). The previous
    response is read here, before anything is held: 404 when unknown to this project, 400 for
    an organization with zero retention."""
    wants_store, background, previous_id = stateful_fields(data)
    key = request.caller
    keeps = store.keeps_responses(key)
    if not keeps and previous_id is not None:
        raise InvalidRequest(
            ZERO_RETENTION.format(what="'previous_response_id' cannot be used"),
            code="zero_retention",
            param="previous_response_id",
        )
    if background and not keeps:
        raise InvalidRequest(
            ZERO_RETENTION.format(what="background responses cannot be polled"),
            code="zero_retention",
            param="background",
        )
    if background and not wants_store:
        raise InvalidRequest(
            "Background responses must be stored: send 'store': true (the default) with "
            "'background': true.",
            param="store",
        )
    context: list[JSON] = []
    if previous_id is not None:
        previous = await store.find(key=key, response_id=previous_id)
        if previous is None:
            raise NotFound(
                f"Previous response with id '{previous_id}' not found.",
                code="previous_response_not_found",
                param="previous_response_id",
            )
        if previous.status in store.RUNNING:
            raise InvalidRequest(
                f"Previous response with id '{previous_id}' is still {previous.status}; wait "
                "for it to end (poll GET /v1/responses/{response_id}) or cancel it.",
                param="previous_response_id",
            )
        context = previous.conversation()
    parsed = parse_responses_request(data, context)
    if not keeps:
        return dataclasses.replace(parsed, store=False, echo={**parsed.echo, "store": False}), None
    if not parsed.store:
        return parsed, None
    return parsed, Keeping(context=context, input_items=input_items(data))


async def _keep(call: Call, keeping: Keeping | None, out: JSON) -> None:
    """Store the response ``out`` of ``call`` (when ``keeping``), before its answer leaves. A
    store that fails is logged and reported in ``out`` (``store``: false): the call is settled
    already and its answer is the caller's."""
    if keeping is None:
        return
    try:
        await store.create(
            key=call.key,
            request_id=call.request_id,
            body=out,
            context=keeping.context,
            input_items=keeping.input_items,
        )
    except Exception:
        log.warning("could not store the response of %s", call.request_id, exc_info=True)
        out["store"] = False


def _object(call: Call, parsed: ResponsesRequest, body: JSON) -> JSON:
    """The ``response`` object of a completion ``body`` (live or cached), with ``infrai``."""
    output, finish_reason = output_items(body)
    out = response_object(
        response_id=_response_id(call),
        created_at=int(time.time()),
        model=call.answer.model,
        echo=parsed.echo,
        output=output,
        usage=call.usage,
        finish_reason=finish_reason,
    )
    out["infrai"] = render.infrai(call)
    return out


async def _answer_from_cache(
    call: Call, parsed: ResponsesRequest, hit: dict[str, Any], keeping: Keeping | None
) -> Response | StreamingResponse:
    """A cached answer: costs nothing, logged (and stored) like any call, streamed if asked."""
    body = dict(hit["body"])
    await stages.finish_cached(call, hit, usage_from(body) or Usage())
    if not parsed.chat.stream:
        out = _object(call, parsed, body)
        await _keep(call, keeping, out)
        return json_response(out, headers=render.headers(call))
    translator = StreamTranslator(
        response_id=_response_id(call), model=call.answer.model, echo=parsed.echo
    )

    async def replay() -> AsyncIterator[bytes]:
        for event in translator.start():
            yield event
        for chunk in completion_chunks(body):
            for event in translator.feed(chunk):
                yield event
        last = translator.completed(call.usage, render.infrai(call))
        if translator.final is not None:
            await _keep(call, keeping, translator.final)
        for event in last:
            yield event

    return StreamingResponse(replay(), headers=render.stream_headers(call, final=True))


async def _open_stream(
    call: Call, parsed: ResponsesRequest, keeping: Keeping | None
) -> StreamingResponse:
    """Fail over until a vendor produces its first chunk, then hand the relay to the consumer."""

    async with stages.closed_on_failure(call):
        upstream, first = await open_upstream_stream(call, parsed.chat)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    translator = StreamTranslator(
        response_id=_response_id(call), model=call.answer.model, echo=parsed.echo
    )
    meter = ResponsesMeter(call, parsed.chat, translator)
    if keeping is None:
        return relay.respond(call, first, upstream, meter)
    return relay.respond(
        call,
        first,
        upstream,
        meter,
        then=lambda chunks: _stored_at_the_end(call, chunks, translator, keeping),
    )


async def _stored_at_the_end(
    call: Call, chunks: AsyncIterator[bytes], translator: StreamTranslator, keeping: Keeping
) -> AsyncIterator[bytes]:
    """``chunks`` (the relay's), the response stored before its last events leave: the relay
    settles, then renders its tail (:attr:`StreamTranslator.final` is set from then on), so the
    first chunk seen with ``final`` set is the tail's first. A stream the client left before
    its end is not stored."""
    kept = False
    try:
        async for data in chunks:
            if not kept and translator.final is not None:
                kept = True
                await _keep(call, keeping, translator.final)
            yield data
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()


# --- GET, DELETE, input_items, cancel ---------------------------------------------------------
FreeHandler = Callable[[ApiRequest], Awaitable[Response | StreamingResponse]]


def _free(endpoint: str) -> Callable[[FreeHandler], FreeHandler]:
    """Run a handler that charges nothing as a call all the same: counted against the key's
    limits (which confirms the key), nothing held, its request-log row (``endpoint``) written
    on every exit with the handler's outcome."""

    def wrap(handler: FreeHandler) -> FreeHandler:
        @functools.wraps(handler)
        async def run(request: ApiRequest) -> Response | StreamingResponse:
            call = Call.open(request, endpoint=endpoint, requested_model="")
            async with stages.closed_on_failure(call):  # a 429 too is logged as this endpoint
                await stages.admit(call, tokens=0)
                response = await handler(request)
            call.charge(Usage())
            await settlement.finish(call, status=RequestStatus.OK, http_status=200)
            response.headers = {**call.limit_headers, **response.headers}
            return response

        return run

    return wrap


def _query(request: ApiRequest, name: str) -> str | None:
    values = request.query.get(name)
    return values[-1] if values else None


def _not_found(response_id: str) -> NotFound:
    return NotFound(
        f"Response with id '{response_id}' not found.",
        code="response_not_found",
        param="response_id",
    )


async def _find(request: ApiRequest) -> store.Stored:
    response_id = request.path_params["response_id"]
    found = await store.find(key=request.caller, response_id=response_id)
    if found is None:
        raise _not_found(response_id)
    return found


@_free("responses.retrieve")
async def retrieve(request: ApiRequest) -> Response | StreamingResponse:
    """``GET /v1/responses/{response_id}``: the stored response as it stands; with
    ``stream=true`` a background response's events after ``starting_after`` (a sequence
    number; all by default), then the rest as they are generated."""
    streamed = (_query(request, "stream") or "").lower() == "true"
    after = -1
    if streamed and (raw := _query(request, "starting_after")) is not None:
        try:
            after = int(raw)
        except ValueError:
            after = -2
        if after < -1:
            raise InvalidRequest(
                "'starting_after' must be an event's sequence number (an integer from 0).",
                param="starting_after",
            )
    found = await _find(request)
    if not streamed:
        return json_response(found.body)
    if not found.background:
        raise InvalidRequest(
            "Only background responses can be streamed; retrieve this one without 'stream'.",
            param="stream",
        )
    return StreamingResponse(
        background.replay(request.caller, found.response_id, after),
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


@_free("responses.delete")
async def delete(request: ApiRequest) -> Response:
    """``DELETE /v1/responses/{response_id}``: gone for good (a running background response
    stops, billed for what it generated)."""
    response_id = request.path_params["response_id"]
    status = await store.delete(key=request.caller, response_id=response_id)
    if status is None:
        raise _not_found(response_id)
    if status in store.RUNNING:
        background.stop_soon(request.floor, response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})


@_free("responses.input_items")
async def list_input_items(request: ApiRequest) -> Response:
    """``GET /v1/responses/{response_id}/input_items``: the items this response was generated
    from — for a chained one (``previous_response_id``) the conversation it continued (earlier
    inputs and outputs), then its own input, as OpenAI lists them — a list object paged by
    ``order`` (``desc``, the default, or ``asc``), ``after`` (an item id) and ``limit``
    (1–100, default 20)."""
    raw = _query(request, "limit")
    try:
        limit = 20 if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest("'limit' must be an integer from 1 to 100.", param="limit")
    order = _query(request, "order") or "desc"
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    stored = await _find(request)
    items = [*stored.context, *stored.input_items]
    if order == "desc":
        items.reverse()
    after = _query(request, "after")
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise InvalidRequest(f"No input item with id '{after}'.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return json_response(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


@_free("responses.cancel")
async def cancel(request: ApiRequest) -> Response:
    """``POST /v1/responses/{response_id}/cancel``: stop a running background response; the
    ``cancelled`` response, billed for what was generated (the rest of its hold released). One
    already cancelled is answered as it is; a response that is not a background one, or has
    ended otherwise, is a 400."""
    response_id = request.path_params["response_id"]
    key = request.caller
    if not await store.request_cancel(key=key, response_id=response_id):
        found = await _find(request)
        if not found.background:
            raise InvalidRequest("Only background responses can be cancelled.", param="response_id")
        if found.status != ResponseStatus.CANCELLED:
            raise InvalidRequest(
                f"Cannot cancel a response that is {found.status}.", param="response_id"
            )
        return json_response(found.body)
    await background.stop(request.floor, key, response_id)
    return json_response((await _find(request)).body)


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/responses", methods={"POST": responses}, confirms_key=True),
    route(
        "/v1/responses/{response_id}",
        methods={"GET": retrieve, "DELETE": delete},
        confirms_key=True,
    ),
    route(
        "/v1/responses/{response_id}/input_items",
        methods={"GET": list_input_items},
        confirms_key=True,
    ),
    route("/v1/responses/{response_id}/cancel", methods={"POST": cancel}, confirms_key=True),
)
