"""``POST /v1/chat/completions``: validate → limit → (cache) → route → hold → call → settle.

Streams are relayed chunk by chunk as the vendor sends them through the one metered relay
(:mod:`inference.relay`), which settles for what was delivered on every exit. The chunk
stream has OpenAI's shape: the same ``id``, ``created`` and ``model`` on every chunk, the
``infrai`` object on the chunk that carries the last ``finish_reason`` (held back until the
vendor's stream ends, so its cost is final), and an empty-``choices`` chunk only when
``stream_options.include_usage`` asked for usage (it carries ``infrai`` too).

What every chat-shaped dialect shares (routing, the hold, the vendor leg, usage, the stream's
count) is :mod:`inference.chat.leg`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from billing.errors import FundsLimit, InsufficientFunds
from catalog.routing import Candidate
from config.errors import InsufficientQuota, UpstreamError
from inference import relay, render, response_cache, stages
from inference.call import Call
from inference.chat.leg import (
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
from inference.chat.validation import ChatRequest, parse_chat_request, to_legacy_function_call
from inference.errors import insufficient_quota
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.usage import (
    InvalidUsage,
    chat_usage_report,
    openai_chat_usage,
)
from inference.vendors import sse
from inference.vendors.base import JSON
from infra.background import spawn
from money.pricing import Usage, cost_nanos, worst_case_usage

ENDPOINT = "chat.completions"


def _completion_id(call: Call) -> str:
    return "chatcmpl-" + call.request.request_id.removeprefix("req_")


async def chat_completions(request: ApiRequest) -> Response | StreamingResponse:
    """The endpoint, stage by stage (:mod:`inference.stages`). See the module docstring."""
    chat = parse_chat_request(request.json())  # 2. parse and validate
    call = Call.open(request, endpoint=ENDPOINT, requested_model=chat.model, stream=chat.stream)
    call.prompt = lambda: str(chat.payload["messages"])
    # 3–4. Routing first: a request no model can take (limits, capabilities) is a 400, never
    # a 429.
    await route_and_limit(call, chat)
    key, hit = await cached_answer(call, chat)
    if hit is not None:
        return await _answer_from_cache(call, chat, hit)
    if chat.stream:
        await _hold(call, chat)  # 5.
        async with stages.closed_on_failure(call):
            return await _open_stream(call, chat, key)  # 6–8 in the relay
    leader = None if key is None else response_cache.lead(key)  # identical requests wait
    try:
        await _hold(call, chat)  # 5.
        answer = await stages.settle_leg(call, CHAT_LEG, chat)  # 6–7.
        body = completion_body(call, chat, answer)  # 8.
        if key is not None and leader is not None and not call.usage_estimated:
            entry = {"body": dict(body), **call.answer.entry()}
            leader.done(entry)
            spawn(leader.store(entry))
    finally:
        if leader is not None:
            leader.close()
    body["infrai"] = render.infrai(call)
    return json_response(body, headers=render.headers(call))


def completion_body(call: Call, chat: ChatRequest, answer: JSON) -> JSON:
    """The vendor's ``answer`` as the client's chat completion (our id, model and usage; the
    legacy ``function_call`` shape where the caller used ``functions``) — without ``infrai``."""
    answer["id"] = _completion_id(call)
    answer["object"] = "chat.completion"
    answer["model"] = call.answer.model
    answer["usage"] = openai_chat_usage(call.usage)
    if chat.legacy_functions:
        to_legacy_function_call(answer)
    return answer


async def _hold(call: Call, chat: ChatRequest) -> None:
    """Hold the worst case of the routed candidates (a 402 says which ``max_tokens`` fits)."""
    assert call.decision is not None
    try:
        await stages.hold(call, lambda candidate: CHAT_LEG.worst_case(chat, candidate))
    except InsufficientFunds as exc:
        raise with_max_tokens_hint(exc, chat, call.decision.candidates) from None


def with_max_tokens_hint(
    exc: InsufficientFunds, chat: ChatRequest, candidates: Sequence[Candidate]
) -> InsufficientQuota:
    """The 402 answering ``exc`` (:func:`inference.errors.insufficient_quota`); for the
    wallet, saying which ``max_tokens`` would fit what is available, or that lowering it would
    not be enough. A budget's 402 has no hint."""
    if exc.limit is not FundsLimit.WALLET or not candidates:
        return insufficient_quota(exc)
    available = exc.available_nanos
    fits: list[int] = []
    for candidate in candidates:
        price = candidate.price  # priced as the hold is (money.pricing.worst_case_usage)
        prompt = cost_nanos(
            price=price,
            usage=worst_case_usage(price, input_tokens=chat.prompt_tokens_upper, output_tokens=0),
        )
        per_million = cost_nanos(
            price=price, usage=worst_case_usage(price, input_tokens=0, output_tokens=1_000_000)
        )
        room = available - prompt
        fits.append(room * 1_000_000 // (per_million * chat.n) if room > 0 and per_million else 0)
    fit = min(fits)
    hint = (
        f" A max_tokens of at most {fit} would fit your available balance."
        if fit >= 1
        else " Lowering max_tokens would not be enough: the prompt alone needs more."
    )
    return insufficient_quota(exc, hint=hint)


async def _answer_from_cache(
    call: Call, chat: ChatRequest, hit: dict[str, Any]
) -> Response | StreamingResponse:
    """A cached answer: costs nothing, logged like any call, streamed if asked."""
    body = dict(hit["body"])
    body["id"] = _completion_id(call)
    await stages.finish_cached(call, hit, usage_from(body) or Usage())
    if chat.legacy_functions:
        to_legacy_function_call(body)
    if not chat.stream:
        body["infrai"] = render.infrai(call)
        return json_response(body, headers=render.headers(call))
    return StreamingResponse(
        _replay(call, chat, body), headers=render.stream_headers(call, final=True)
    )


async def _replay(call: Call, chat: ChatRequest, body: JSON) -> AsyncIterator[bytes]:
    """A cached completion as the chunks a live stream would have sent (same shape)."""
    chunks = completion_chunks(body)
    if chunks:
        chunks[-1]["infrai"] = render.infrai(call)
    for chunk in chunks:
        yield sse.encode(chunk)
    if chat.include_usage:
        base = {k: chunks[0][k] for k in ("id", "object", "created", "model")} if chunks else {}
        yield sse.encode(
            {**base, "choices": [], "usage": body.get("usage"), "infrai": render.infrai(call)}
        )
    yield sse.DONE


class ChatMeter(CountingMeter):
    """The chat stream's :class:`~inference.relay.Meter` (see the module docstring)."""

    def __init__(self, call: Call, chat: ChatRequest, cache_key: str | None = None) -> None:
        self.limit = output_limit(call, chat)
        super().__init__(call, chat, self.limit, chat.n)
        self.cache_key = cache_key
        self.base: JSON = {
            "id": _completion_id(call),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": call.answer.model,
        }
        self.finished_choices: set[int] = set()
        self.pending: JSON | None = None  # the latest chunk with a finish_reason, held back
        # What a cache entry needs (content-only answers: tool-call deltas are not assembled).
        self.texts: dict[int, list[str]] = {}
        self.finish_reasons: dict[int, str] = {}
        self.cacheable = cache_key is not None

    def start(self) -> Iterable[bytes]:
        return ()

    def feed(self, item: Any) -> Iterable[bytes]:
        if not isinstance(item, dict):
            raise relay.MalformedChunk(f"a chunk that is a JSON {type(item).__name__}")
        if "error" in item:
            raise relay.MalformedChunk("an error chunk")
        try:
            usage = chat_usage_report(item)
        except InvalidUsage:
            usage, self.usage_invalid = None, True
        if usage is not None:
            self.vendor_usage = usage
        choices = item.get("choices")
        if not choices:
            return ()
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise relay.MalformedChunk("chunk choices that are not a list of objects")
        out: list[bytes] = []
        if self.pending is not None:
            out.append(sse.encode(self.pending))
            self.pending = None
        chunk: JSON = {**item, **self.base}
        chunk.pop("usage", None)
        if self.chat.legacy_functions:
            to_legacy_function_call(chunk)
        text = ""
        finished = False
        for choice in choices:
            delta = choice.get("delta") or {}
            piece = message_text(delta)
            text += piece
            index = int(choice.get("index") or 0)
            self.texts.setdefault(index, []).append(piece)
            if delta.get("tool_calls") or delta.get("function_call"):
                self.cacheable = False
            if choice.get("finish_reason") is not None:
                finished = True
                self.finished_choices.add(index)
                self.finish_reasons[index] = str(choice["finish_reason"])
        self.count.add(text)
        if finished:
            self.pending = chunk
        else:
            out.append(sse.encode(chunk))
        if self.count.over and not self.complete():
            self.cut, self.cacheable = True, False
            raise relay.OutputCapReached(out)
        return out

    def complete(self) -> bool:
        return len(self.finished_choices) >= self.chat.n

    def _length_chunks(self) -> list[bytes]:
        """A stream cut at the output cap: the chunk held back, then one ``finish_reason:
        "length"`` chunk per unfinished choice, the last held back for ``infrai``."""
        out = [sse.encode(self.pending)] if self.pending is not None else []
        self.pending = None
        unfinished = [i for i in range(self.chat.n) if i not in self.finished_choices]
        for index in unfinished:
            choice = {"index": index, "delta": {}, "finish_reason": "length"}
            self.finished_choices.add(index)
            self.finish_reasons[index] = "length"
            chunk: JSON = {**self.base, "choices": [choice]}
            if index != unfinished[-1]:
                out.append(sse.encode(chunk))
            else:
                self.pending = chunk
        return out

    def _store(self, call: Call) -> None:
        """Keep a deterministic stream's answer for the exact cache (as a completion)."""
        if not self.cacheable or self.cache_key is None or call.usage_estimated:
            return
        body: JSON = {
            **self.base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": index,
                    "message": {"role": "assistant", "content": "".join(self.texts[index])},
                    "finish_reason": self.finish_reasons.get(index),
                    "logprobs": None,
                }
                for index in sorted(self.texts)
            ],
            "usage": openai_chat_usage(call.usage),
        }
        spawn(response_cache.store(self.cache_key, {"body": body, **call.answer.entry()}))

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        if fault is None:
            self._store(call)
        infrai = render.infrai(call)
        out: list[bytes] = []
        if self.cut:
            out.extend(self._length_chunks())
        if self.pending is not None:
            self.pending["infrai"] = infrai
            out.append(sse.encode(self.pending))
            self.pending = None
        elif fault is None and not self.chat.include_usage:
            # A vendor that never sent a finish_reason: the infrai object still arrives.
            out.append(sse.encode({**self.base, "choices": [], "infrai": infrai}))
        if self.chat.include_usage:
            usage_chunk = {**self.base, "choices": [], "usage": openai_chat_usage(call.usage)}
            out.append(sse.encode({**usage_chunk, "infrai": infrai}))
        if fault is not None:
            # The SDKs raise on this event and keep only ``error``: it carries ``infrai``.
            body = UpstreamError(fault.message, code=fault.code).body()
            body["error"]["infrai"] = infrai
            out.append(sse.encode(body))
        out.append(sse.DONE)
        return out


async def _open_stream(call: Call, chat: ChatRequest, cache_key: str | None) -> StreamingResponse:
    """Open the upstream stream, then hand the relay to the consumer."""
    upstream, first = await open_upstream_stream(call, chat)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    return relay.respond(call, first, upstream, ChatMeter(call, chat, cache_key))


# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/chat/completions", methods={"POST": chat_completions}, confirms_key=True),)
