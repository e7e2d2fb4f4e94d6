"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API over
any chat-capable model.

validate (Anthropic's fields, then the chat rules: :mod:`inference.messages.translate`) → route
→ limit → (cache) → hold (prompt bound + ``max_tokens``) → call the vendor's chat API with
failover → settle → a ``message`` object with the ``infrai`` object and the ``X-Infrai-*``
headers. Streams relay the vendor's chat chunks as Anthropic's events as they arrive; the relay
settles for what was delivered on every exit before its last event (``message_delta`` with the
billed usage and ``infrai``, then ``message_stop``), and a vendor failure mid-stream ends with
an ``error`` event, never a fake success.

A candidate on an Anthropic-format vendor (adapter ``anthropic``) is sent the request as the
caller sent it, with its ``anthropic-version`` and ``anthropic-beta`` headers (thinking blocks
and their signatures, ``cache_control`` and every other field untouched), and its answer is
relayed as it came — content blocks and stream events byte for byte — with our id, the
canonical model, the billed usage and ``infrai``; billing reads its usage as for any vendor
(:func:`inference.usage.reconcile` against our count of what it delivered, thinking included).

Every refusal on these routes — authentication included — comes in Anthropic's error shape
(:func:`anthropic_error_response`) with the status infrai gives it everywhere; a 402 is
Anthropic's ``billing_error``. ``count_tokens`` answers our count of the prompt
(``{"input_tokens": N}``): routed (an unknown model is a 404), rate-limited and logged (as a
free call), never held or charged.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, replace
from typing import Any

from billing.errors import InsufficientFunds
from catalog.errors import RoutingError
from catalog.routing import Candidate
from config.errors import ApiError
from inference import relay, render, response_cache, settlement, stages, tokens
from inference.call import Call
from inference.chat.leg import (
    CHAT_LEG,
    CountingMeter,
    TranslatingMeter,
    cached_answer,
    completion_chunks,
    output_limit,
    relayed,
    route_and_limit,
    routing_request,
    send_chat,
    usage_from,
    vendor_payload,
    worst_case,
)
from inference.chat.validation import ChatRequest
from inference.endpoints.chat import with_max_tokens_hint
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.messages.answers import (
    StreamTranslator,
    anthropic_usage,
    error_body,
    message_object,
    native_delta_text,
    native_text,
    sse_event,
    stream_end,
    stream_failed,
)
from inference.messages.translate import MessagesRequest, parse_messages_request
from inference.models import RequestStatus
from inference.stages import Leg
from inference.usage import Billed, InvalidUsage, chat_usage_report, reconcile
from inference.vendors.anthropic import AnthropicAdapter, ChunkTranslator, from_anthropic
from inference.vendors.base import JSON, Adapter, VendorTarget
from inference.vendors.errors import VendorUnavailable
from inference.vendors.registry import adapter_for
from infra.background import spawn
from money.pricing import Usage

ENDPOINT = "messages"


def anthropic_error_response(exc: ApiError) -> Response:
    """``exc`` in Anthropic's error shape, with its status and headers (``retry-after``,
    ``x-should-retry``)."""
    body = error_body(exc.status, exc.message, code=exc.code, param=exc.param)
    return json_response(body, status=exc.status, headers=exc.headers())


def _message_id(call: Call) -> str:
    return "msg_" + call.request.request_id.removeprefix("req_")


# --- the vendor leg: translated to chat, or sent as it is -------------------------------------
@dataclass(frozen=True, slots=True)
class Answer:
    """A vendor's whole answer: a chat completion, or (``native``) an Anthropic-format vendor's
    ``message`` as it sent it, with ``completion`` its reading as one."""

    completion: JSON
    native: JSON | None = None


def native(candidate: Candidate) -> bool:
    """Whether ``candidate`` speaks Anthropic's wire format (it is sent requests as they are)."""
    return isinstance(adapter_for(candidate.adapter_kind), AnthropicAdapter)


def _worst_case(parsed: MessagesRequest, candidate: Candidate) -> Usage:
    """Chat's worst case; for a native candidate, with the thinking blocks it is sent too."""
    if not native(candidate):
        return worst_case(parsed.chat, candidate)
    usage = worst_case(parsed.chat, candidate, cache_writes=parsed.caches_prompt)
    return replace(usage, input_tokens=usage.input_tokens + parsed.untranslated_tokens_upper)


async def _send(
    adapter: Adapter, target: VendorTarget, candidate: Candidate, parsed: MessagesRequest
) -> Answer:
    if isinstance(adapter, AnthropicAdapter):
        message = await adapter.messages(target, parsed.native, parsed.headers)
        return Answer(from_anthropic(message, model=target.upstream_model), message)
    return Answer(await send_chat(adapter, target, candidate, parsed.chat))


def _bill(call: Call, parsed: MessagesRequest, answer: Answer) -> Billed:
    """Chat's billing; a native answer's usage against our count of all it delivered."""
    if answer.native is None:
        return CHAT_LEG.bill(call, parsed.chat, answer.completion)
    try:
        report, invalid = chat_usage_report(answer.completion), False
    except InvalidUsage:
        report, invalid = None, True
    count = tokens.count_text(native_text(answer.native))
    return reconcile(report, relayed(call, parsed.chat, count), invalid=invalid)


MESSAGES_LEG: Leg[MessagesRequest, Answer] = Leg(worst_case=_worst_case, send=_send, bill=_bill)


async def create_message(request: ApiRequest) -> Response | StreamingResponse:
    """``POST /v1/messages``. See the module docstring."""
    parsed = parse_messages_request(request.json(), headers=request.headers)
    chat = parsed.chat
    call = Call.open(request, endpoint=ENDPOINT, requested_model=chat.model, stream=chat.stream)
    call.unforwarded = lambda candidate: () if native(candidate) else parsed.ignored
    call.prompt = lambda: str(chat.payload["messages"])
    await _route(call, parsed)
    key, hit = await cached_answer(call, chat)
    if hit is not None:
        return await _answer_from_cache(call, parsed, hit)
    assert call.decision is not None
    try:
        await stages.hold(call, lambda candidate: MESSAGES_LEG.worst_case(parsed, candidate))
    except InsufficientFunds as exc:
        raise with_max_tokens_hint(exc, chat, call.decision.candidates) from None
    if chat.stream:
        return await _open_stream(call, parsed)
    leader = None if key is None else response_cache.lead(key)
    try:
        answer = await stages.settle_leg(call, MESSAGES_LEG, parsed)
        cacheable = answer.native is None and not call.usage_estimated
        if key is not None and leader is not None and cacheable:
            cached = {**answer.completion, "id": "cached", "model": call.answer.model}
            entry = {"body": cached, **call.answer.entry()}
            leader.done(entry)
            spawn(leader.store(entry))
    finally:
        if leader is not None:
            leader.close()
    if answer.native is not None:
        return _render_native(call, answer.native)
    return _render(call, answer.completion)


async def count_tokens(request: ApiRequest) -> Response:
    """``POST /v1/messages/count_tokens``: our count of the prompt, nothing held or charged."""
    parsed = parse_messages_request(request.json(), count_only=True)
    call = Call.open(
        request, endpoint=f"{ENDPOINT}.count_tokens", requested_model=parsed.chat.model
    )
    try:
        await stages.route(call, routing_request(parsed.chat))
    except (ApiError, RoutingError) as exc:
        exc.param = parsed.param(exc.param)
        raise
    await stages.admit(call, tokens=0)
    call.charge(Usage())  # logged like every call of a key, as a free one
    await settlement.finish(call, status=RequestStatus.OK, http_status=200)
    return json_response(
        {"input_tokens": parsed.chat.prompt_tokens}, headers=dict(call.limit_headers)
    )


async def _route(call: Call, parsed: MessagesRequest) -> None:
    """Route and count the call; a refusal names the Messages field."""
    try:
        await route_and_limit(call, parsed.chat)
    except (ApiError, RoutingError) as exc:
        exc.param = parsed.param(exc.param)
        raise


def _render(call: Call, completion: JSON) -> Response:
    """The ``message`` object of a completion (live or cached)."""
    out = message_object(
        message_id=_message_id(call),
        model=call.answer.model,
        completion=completion,
        usage=call.usage,
    )
    out["infrai"] = render.infrai(call)
    return json_response(out, headers=render.headers(call))


def _render_native(call: Call, message: JSON) -> Response:
    """A native vendor's ``message`` as it answered it (its content blocks untouched), with
    our id, the canonical model, the billed usage and ``infrai``."""
    out = {
        **message,
        "id": _message_id(call),
        "model": call.answer.model,
        "usage": anthropic_usage(call.usage),
        "infrai": render.infrai(call),
    }
    return json_response(out, headers=render.headers(call))


def _translator(call: Call, chat: ChatRequest) -> StreamTranslator:
    return StreamTranslator(
        message_id=_message_id(call), model=call.answer.model, input_tokens=chat.prompt_tokens
    )


async def _answer_from_cache(
    call: Call, parsed: MessagesRequest, hit: dict[str, Any]
) -> Response | StreamingResponse:
    """A cached answer: costs nothing, logged like any call, streamed if asked."""
    body = dict(hit["body"])
    await stages.finish_cached(call, hit, usage_from(body) or Usage())
    if not parsed.chat.stream:
        return _render(call, body)
    translator = _translator(call, parsed.chat)

    async def replay() -> AsyncIterator[bytes]:
        for event in translator.start():
            yield event
        for chunk in completion_chunks(body):
            for event in translator.feed(chunk):
                yield event
        for event in translator.completed(call.usage, render.infrai(call)):
            yield event

    return StreamingResponse(replay(), headers=render.stream_headers(call, final=True))


async def _open_upstream(call: Call, parsed: MessagesRequest) -> tuple[AsyncGenerator[Any], Any]:
    """Fail over until a vendor produces its first item (a chat chunk, or a native vendor's
    ``(data, event)``); the caller owns the returned stream."""

    async def first_item(
        adapter: Adapter, target: VendorTarget, candidate: Candidate
    ) -> tuple[AsyncGenerator[Any], Any]:
        upstream: AsyncGenerator[Any]
        if isinstance(adapter, AnthropicAdapter):
            upstream = adapter.stream_messages(target, parsed.native, parsed.headers)
        else:
            upstream = adapter.stream_chat(target, vendor_payload(parsed.chat, candidate))
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            raise VendorUnavailable("the vendor ended the stream before any event") from None
        except BaseException:
            await upstream.aclose()
            raise
        return upstream, first

    return await stages.call_vendor(call, first_item)


async def _open_stream(call: Call, parsed: MessagesRequest) -> StreamingResponse:
    """Fail over until a vendor produces its first chunk, then hand the relay to the consumer."""
    async with stages.closed_on_failure(call):
        upstream, first = await _open_upstream(call, parsed)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    meter: MessagesMeter | NativeMeter
    if call.served_by is not None and native(call.served_by):
        meter = NativeMeter(call, parsed.chat)
    else:
        meter = MessagesMeter(call, parsed.chat, _translator(call, parsed.chat))
    return relay.respond(call, first, upstream, meter)


class MessagesMeter(TranslatingMeter):
    """The Messages stream's :class:`~inference.relay.Meter`: chat chunks in, Anthropic's events
    out; a stream the relay cuts at the output cap ends with ``stop_reason: "max_tokens"``, one
    that breaks with an ``error`` event."""

    translator: StreamTranslator

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        if fault is None:
            return self.translator.completed(call.usage, render.infrai(call))
        return stream_failed(render.infrai(call), fault.message, fault.code)


class NativeMeter(CountingMeter):
    """The :class:`~inference.relay.Meter` of a native vendor's stream: its events relayed as
    they came (``data`` byte for byte), but ``message_start`` with our id and the canonical
    model, and its ``message_delta`` / ``message_stop`` held back for the tail, which carries the
    billed usage and ``infrai``. Its usage is read as the adapter reads it for chat
    (:class:`~inference.vendors.anthropic.ChunkTranslator`); our count is of every delta, thinking
    included."""

    def __init__(self, call: Call, chat: ChatRequest) -> None:
        super().__init__(call, chat, output_limit(call, chat))
        self.usage_reader = ChunkTranslator(call.answer.model)
        self.open_block: int | None = None
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None

    def start(self) -> Iterable[bytes]:
        return ()

    def feed(self, item: Any) -> Iterable[bytes]:
        data, event = item
        kind = event.get("type")
        for chunk in self.usage_reader.feed(str(kind), event):
            try:
                self.vendor_usage = chat_usage_report(chunk) or self.vendor_usage
            except InvalidUsage:
                self.usage_invalid = True
        out: list[bytes] = []
        if kind == "message_start":
            message = {**(event.get("message") or {}), "id": _message_id(self.call)}
            message["model"] = self.call.answer.model
            out.append(sse_event({**event, "message": message}))
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = str(delta.get("stop_reason") or "end_turn")
            self.stop_sequence = delta.get("stop_sequence")
        elif kind != "message_stop":
            if kind == "content_block_start":
                self.open_block = event.get("index")
            elif kind == "content_block_stop":
                self.open_block = None
            out.append(f"event: {kind}\ndata: {data}\n\n".encode())
            self.count.add(native_delta_text(event))
        if self.count.over and not self.complete():
            self.cut = True
            raise relay.OutputCapReached(out)
        return out

    def complete(self) -> bool:
        return self.stop_reason is not None

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        infrai = render.infrai(call)
        if fault is not None:
            return stream_failed(infrai, fault.message, fault.code)
        out: list[bytes] = []
        if self.cut and self.open_block is not None:
            out.append(sse_event({"type": "content_block_stop", "index": self.open_block}))
        reason = "max_tokens" if self.cut else self.stop_reason or "end_turn"
        out.extend(stream_end(reason, call.usage, infrai, stop_sequence=self.stop_sequence))
        return out


# The routes of this module, for the app's table (config.asgi): every refusal in Anthropic's
# shape.
ROUTES = (
    route(
        "/v1/messages",
        methods={"POST": create_message},
        confirms_key=True,
        render_error=anthropic_error_response,
    ),
    route(
        "/v1/messages/count_tokens",
        methods={"POST": count_tokens},
        confirms_key=True,
        render_error=anthropic_error_response,
    ),
)
