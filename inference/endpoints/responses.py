"""``POST /v1/responses``: the Responses API over chat-capable models.

validate (the chat rules, :mod:`inference.responses.translate`) → limit → route (the chat
request's capabilities plus ``responses``) → hold (prompt bound + ``max_output_tokens`` or the
platform cap) → call the vendor's chat API with failover → settle → a ``response`` object.
Streams relay the vendor's chat chunks as Responses events as they arrive; the relay settles for
what was delivered on every exit (end, vendor failure after the first event, disconnect) before
its last event, and a vendor failure mid-stream ends with ``response.failed``, never a fake
success. Responses are not stored (``store`` is accepted and reported false).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from catalog.errors import RoutingError
from config.errors import ApiError
from inference import relay, render, response_cache, settlement, stages
from inference.call import Call
from inference.chat.validation import ChatRequest
from inference.endpoints.chat import (
    CHAT_LEG,
    CountingMeter,
    cached_answer,
    completion_chunks,
    message_text,
    open_upstream_stream,
    output_limit,
    route_and_limit,
    usage_from,
)
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.responses.translate import (
    ResponsesRequest,
    StreamTranslator,
    output_items,
    parse_responses_request,
    response_object,
    responses_param,
)
from inference.usage import (
    InvalidUsage,
    chat_usage_report,
)
from inference.vendors.base import JSON
from infra.background import spawn
from money.pricing import Usage

ENDPOINT = "responses"


def _response_id(call: Call) -> str:
    return "resp_" + call.request.request_id.removeprefix("req_")


async def responses(request: ApiRequest) -> Response | StreamingResponse:
    """The endpoint. See the module docstring."""
    parsed = parse_responses_request(request.json())
    chat = parsed.chat
    call = Call.open(request, endpoint=ENDPOINT, requested_model=chat.model, stream=chat.stream)
    call.prompt = lambda: str(chat.payload["messages"])
    try:  # routing first: a request no model can take is a 400 (param as Responses names it)
        await route_and_limit(call, chat)
    except (ApiError, RoutingError) as exc:
        exc.param = responses_param(exc.param)
        raise
    key, hit = await cached_answer(call, chat)
    if hit is not None:
        return await _answer_from_cache(call, parsed, hit)
    await stages.hold(call, lambda candidate: CHAT_LEG.worst_case(chat, candidate))
    if chat.stream:
        return await _open_stream(call, parsed)
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
    return _render(call, parsed, body)


def _render(call: Call, parsed: ResponsesRequest, body: JSON) -> Response:
    """The ``response`` object of a completion ``body`` (live or cached)."""
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
    return json_response(out, headers=render.headers(call))


async def _answer_from_cache(
    call: Call, parsed: ResponsesRequest, hit: dict[str, Any]
) -> Response | StreamingResponse:
    """A cached answer: costs nothing, logged like any call, streamed if asked."""
    body = dict(hit["body"])
    await stages.finish_cached(call, hit, usage_from(body) or Usage())
    if not parsed.chat.stream:
        return _render(call, parsed, body)
    translator = StreamTranslator(
        response_id=_response_id(call), model=call.answer.model, echo=parsed.echo
    )

    async def replay() -> AsyncIterator[bytes]:
        for event in translator.start():
            yield event
        for chunk in completion_chunks(body):
            for event in translator.feed(chunk):
                yield event
        for event in translator.completed(call.usage, render.infrai(call)):
            yield event

    return StreamingResponse(replay(), headers=render.stream_headers(call, final=True))


async def _open_stream(call: Call, parsed: ResponsesRequest) -> StreamingResponse:
    """Fail over until a vendor produces its first chunk, then hand the relay to the consumer."""

    async with stages.closed_on_failure(call):
        upstream, first = await open_upstream_stream(call, parsed.chat)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    translator = StreamTranslator(
        response_id=_response_id(call), model=call.answer.model, echo=parsed.echo
    )
    meter = ResponsesMeter(call, parsed.chat, translator)

    async def on_close() -> None:  # the response ended before the relay started
        await upstream.aclose()
        if not call.finished:
            call.charge(meter.usage(relay.Outcome.CANCELLED)[0], estimated=True)
            await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)

    chunks = relay.relay(call, relay.prepend(first, upstream), meter, upstream.aclose)
    return StreamingResponse(
        chunks, headers=render.stream_headers(call, final=False), on_close=on_close
    )


class ResponsesMeter(CountingMeter):
    """The Responses stream's :class:`~inference.relay.Meter`: chat chunks in, Responses
    events out; a stream that ends early ends with ``response.failed``, one the relay cuts at
    the output cap with ``response.incomplete`` (``max_output_tokens``)."""

    def __init__(self, call: Call, chat: ChatRequest, translator: StreamTranslator) -> None:
        super().__init__(call, chat, output_limit(call, chat))
        self.translator = translator

    def start(self) -> Iterable[bytes]:
        return self.translator.start()

    def feed(self, item: Any) -> Iterable[bytes]:
        if not isinstance(item, dict):
            raise relay.MalformedChunk(f"a chunk that is a JSON {type(item).__name__}")
        if "error" in item:
            raise relay.MalformedChunk("an error chunk")
        choices = item.get("choices")
        if choices is not None and (
            not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices)
        ):
            raise relay.MalformedChunk("chunk choices that are not a list of objects")
        try:
            self.vendor_usage = chat_usage_report(item) or self.vendor_usage
        except InvalidUsage:
            self.usage_invalid = True
        events = self.translator.feed(item)
        for choice in choices or ():
            if choice.get("index", 0) == 0:  # the translator relays the first choice only
                self.count.add(message_text(choice.get("delta") or {}))
        if self.count.over and not self.complete():
            self.cut = True
            self.translator.finish_reason = "length"
            raise relay.OutputCapReached(events)
        return events

    def complete(self) -> bool:
        return self.translator.finish_reason is not None

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        if fault is None:
            return self.translator.completed(call.usage, render.infrai(call))
        return self.translator.failed(call.usage, render.infrai(call), fault.message)


# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/responses", methods={"POST": responses}, confirms_key=True),)
