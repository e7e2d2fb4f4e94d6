"""``POST /v1/chat/completions``: validate → limit → (cache) → route → hold → call → settle.

Streams are relayed chunk by chunk as the vendor sends them through the one metered relay
(:mod:`inference.relay`), which settles for what was delivered on every exit. The chunk
stream has OpenAI's shape: the same ``id``, ``created`` and ``model`` on every chunk, the
``infrai`` object on the chunk that carries the last ``finish_reason`` (held back until the
vendor's stream ends, so its cost is final), and an empty-``choices`` chunk only when
``stream_options.include_usage`` asked for usage (it carries ``infrai`` too).

When the caller gives no ``max_tokens``, a model with a default output limit in the catalog
(``default_output_tokens``, the local models' 512) is sent that as ``max_tokens`` and held for
it — never the whole context; for any other model none is sent and the hold is sized per
candidate from the model's own output limit and context window, never a fixed 4096.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any

from django.conf import settings

from billing.errors import FundsLimit, InsufficientFunds
from catalog.routing import Candidate, RoutingRequest
from config.errors import InsufficientQuota, UpstreamError
from inference import relay, render, response_cache, settlement, stages, tokens
from inference.call import Call
from inference.chat.validation import ChatRequest, parse_chat_request, to_legacy_function_call
from inference.errors import insufficient_quota
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.stages import Leg
from inference.usage import (
    INVALID_USAGE_NOTE,
    OUTPUT_CAP_NOTE,
    Billed,
    InvalidUsage,
    Relayed,
    UsageReport,
    chat_usage,
    chat_usage_report,
    counted,
    openai_chat_usage,
    reconcile,
    stream_cut_tokens,
)
from inference.vendors import sse
from inference.vendors.base import JSON, Adapter, VendorTarget
from inference.vendors.errors import VendorUnavailable
from infra.background import spawn
from money.pricing import Usage, cost_nanos

ENDPOINT = "chat.completions"


def _completion_id(call: Call) -> str:
    return "chatcmpl-" + call.request.request_id.removeprefix("req_")


def usage_from(body: JSON) -> Usage | None:
    """The usage a chat completion (or chunk) reports; ``None`` when absent or untrue."""
    try:
        return chat_usage(body)
    except InvalidUsage:
        return None


def message_text(message: JSON) -> str:
    """The text a message (or a chunk's delta) delivers: content, tool names and arguments."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        parts.append(str(function.get("name") or "") + str(function.get("arguments") or ""))
    return "".join(parts)


def prompt_text_tokens(chat: ChatRequest) -> int:
    """Our count of the prompt's message text alone (``Relayed.prompt_text_tokens``): the
    validated count less OpenAI's framing, the flat rate per image and the tool definitions
    (recounted here, only when there are tools)."""
    messages = chat.payload["messages"]
    images = sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if isinstance(p, dict) and p.get("type") == "image_url"
    )
    tools = chat.payload.get("tools")
    tools_tokens = tokens.count_text(json.dumps(tools)) if tools else 0
    framing = tokens.framing_tokens(len(messages)) + tokens.IMAGE_TOKENS * images
    return max(chat.prompt_tokens - framing - tools_tokens, 0)


def output_limit(call: Call, chat: ChatRequest) -> int:
    """The most output tokens the call allows over all its choices: the served model's
    :func:`output_cap` × ``n``."""
    return output_cap(chat, call.served_by) * chat.n


def relayed(
    call: Call, chat: ChatRequest, output_tokens: int, *, prompt_text: int | None = None
) -> Relayed:
    """What we count of a chat-shaped call whose delivered text is ``output_tokens`` tokens
    (``prompt_text``: :func:`prompt_text_tokens` if already known)."""
    return Relayed(
        prompt_tokens=chat.prompt_tokens,
        prompt_text_tokens=prompt_text_tokens(chat) if prompt_text is None else prompt_text,
        output_tokens=output_tokens,
        output_cap=output_limit(call, chat),
        choices=chat.n,
    )


def vendor_payload(chat: ChatRequest, candidate: Candidate) -> JSON:
    """The chat body as ``candidate`` is sent it (a copy: adapters may add to it): with its
    model's default output limit as ``max_tokens`` when the caller set no cap and the catalog
    has one (the hold and the relay's cut follow the same figure, :func:`output_cap`); a null
    ``max_tokens`` is not sent."""
    payload = {k: v for k, v in chat.payload.items() if k != "max_tokens" or v is not None}
    if chat.max_output_tokens is None and candidate.default_output_tokens:
        payload["max_tokens"] = output_cap(chat, candidate)
    return payload


def output_cap(chat: ChatRequest, candidate: Candidate | None = None) -> int:
    """The most output tokens one choice may produce: the caller's ``max_tokens``, else the
    model's default output limit, else its own output limit, and never more than what its
    context window leaves after the prompt
    (``INFRAI_DEFAULT_MAX_TOKENS`` before routing, or for a model whose limits are unknown)."""
    if candidate is not None:
        room = candidate.output_room(chat.prompt_tokens, chat.max_output_tokens)
        if room is not None:
            return int(room)
    if chat.max_output_tokens is not None:
        return int(chat.max_output_tokens)
    return int(settings.INFRAI_DEFAULT_MAX_TOKENS)


def routing_request(chat: ChatRequest) -> RoutingRequest:
    """What routing needs of a chat request: its needs, parameters, and limits (prompt tokens
    and the caller's output cap, checked against each model). The expected usage (for cost
    ranking) assumes at most 512 output tokens per choice."""
    return RoutingRequest(
        model=chat.model,
        capabilities=chat.capabilities,
        params=chat.params,
        task=chat.task,
        prefer=chat.prefer,
        expected_usage=Usage(
            input_tokens=chat.prompt_tokens_likely,
            output_tokens=min(output_cap(chat), 512) * chat.n,
        ),
        prompt_tokens=chat.prompt_tokens,
        max_output_tokens=chat.max_output_tokens,
        max_output_param=chat.max_output_param,
    )


def worst_case(chat: ChatRequest, candidate: Candidate) -> Usage:
    """The most a call to ``candidate`` can consume (the hold)."""
    return Usage(
        input_tokens=chat.prompt_tokens_upper, output_tokens=output_cap(chat, candidate) * chat.n
    )


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


async def send_chat(
    adapter: Adapter, target: VendorTarget, candidate: Candidate, chat: ChatRequest
) -> JSON:
    """One candidate's whole chat answer."""
    return await adapter.chat(target, vendor_payload(chat, candidate))


async def route_and_limit(call: Call, chat: ChatRequest) -> None:
    """Route (limits and capabilities refuse with a 400 here), then count the call against
    the key's rate limits with the routed models' output caps."""
    decision = await stages.route(call, routing_request(chat))
    cap = max(output_cap(chat, c) for c in decision.candidates) if decision.candidates else 0
    await stages.admit(call, tokens=chat.prompt_tokens_likely + cap * chat.n)


async def cached_answer(call: Call, chat: ChatRequest) -> tuple[str | None, JSON | None]:
    """``(cache key, cached entry)`` of a chat-shaped call: no key when it is not
    deterministic or opted out; the entry when this organization has the answer (or an
    identical request in flight brings it)."""
    if not (chat.cache_allowed and chat.deterministic):
        return None, None
    key = response_cache.cache_key(
        organization_id=call.key.organization_id,
        endpoint=call.ctx.endpoint,
        payload=chat.payload,
        extra=[chat.task, chat.prefer],
    )
    return key, await response_cache.find(key)


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
        prompt = cost_nanos(
            price=candidate.price, usage=Usage(input_tokens=chat.prompt_tokens_upper)
        )
        per_million = cost_nanos(price=candidate.price, usage=Usage(output_tokens=1_000_000))
        room = available - prompt
        fits.append(room * 1_000_000 // (per_million * chat.n) if room > 0 and per_million else 0)
    fit = min(fits)
    hint = (
        f" A max_tokens of at most {fit} would fit your available balance."
        if fit >= 1
        else " Lowering max_tokens would not be enough: the prompt alone needs more."
    )
    return insufficient_quota(exc, hint=hint)


def completion_usage(call: Call, chat: ChatRequest, body: JSON) -> Billed:
    """What to bill for a whole completion: the vendor's usage where it is plausible against
    our count of the answer and the output cap, else our count (:func:`inference.usage.
    reconcile`). The answer is not truncated: one longer than the cap is billed at the cap."""
    try:
        report, invalid = chat_usage_report(body), False
    except InvalidUsage:
        report, invalid = None, True
    choices = body.get("choices") if isinstance(body.get("choices"), list) else []
    text = "".join(
        message_text(c.get("message") or {}) for c in choices or [] if isinstance(c, dict)
    )
    return reconcile(report, relayed(call, chat, tokens.count_text(text)), invalid=invalid)


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


def completion_chunks(body: JSON) -> list[JSON]:
    """A completion as the chunks a live stream sends: per choice its content (and tool
    calls), then its ``finish_reason`` — no ``infrai``, no usage chunk."""
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body.get("created", int(time.time())),
        "model": body["model"],
    }
    chunks: list[JSON] = []
    for choice in body.get("choices", []):
        message = choice.get("message") or {}
        delta: JSON = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(message["tool_calls"])]
        if message.get("function_call"):
            delta["function_call"] = message["function_call"]
        index = choice.get("index", 0)
        finish = {"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")}
        chunks.append(
            {**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}
        )
        chunks.append({**base, "choices": [finish]})
    return chunks


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


async def open_upstream_stream(
    call: Call, chat: ChatRequest
) -> tuple[AsyncGenerator[JSON, None], JSON]:
    """Fail over until a vendor produces its first chunk; returns its stream and that chunk.

    Nothing has reached the client yet, so every failure up to here may move on to the next
    candidate. The caller owns the returned stream (closing it cancels the upstream request).
    """

    async def first_chunk(
        adapter: Any, target: Any, candidate: Candidate
    ) -> tuple[AsyncGenerator[JSON, None], JSON]:
        upstream = adapter.stream_chat(target, vendor_payload(chat, candidate))
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            raise VendorUnavailable("the vendor ended the stream before any chunk") from None
        except BaseException:
            await upstream.aclose()
            raise
        return upstream, first

    return await stages.call_vendor(call, first_chunk)


class CountingMeter:
    """What every chat-shaped stream's meter counts and how it bills (chat, Responses): our
    running count of the delivered text (past ``stream_cut_tokens`` of ``limit`` × ``n`` the
    relay ends the stream), the vendor's report, and :meth:`usage` from both."""

    def __init__(self, call: Call, chat: ChatRequest, limit: int, n: int = 1) -> None:
        self.call, self.chat = call, chat
        self.count = tokens.RunningCount(stream_cut_tokens(limit, n))
        self.cut = False  # ended by us at the output cap
        self.prompt_text: int | None = None
        self.vendor_usage: UsageReport | None = None
        self.usage_invalid = False

    def complete(self) -> bool:
        raise NotImplementedError

    def usage(self, outcome: relay.Outcome) -> Billed:
        if self.prompt_text is None:  # usage() may be asked again (shutdown, checkpoints)
            self.prompt_text = prompt_text_tokens(self.chat)
        counts = relayed(self.call, self.chat, self.count.total(), prompt_text=self.prompt_text)
        if self.cut:
            return counted(counts, note=OUTPUT_CAP_NOTE, disputed=True, running=self.vendor_usage)
        if outcome is relay.Outcome.COMPLETE or self.complete():
            return reconcile(self.vendor_usage, counts, invalid=self.usage_invalid)
        return counted(
            counts,
            note=INVALID_USAGE_NOTE if self.usage_invalid else "",
            running=None if self.usage_invalid else self.vendor_usage,
        )


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
    meter = ChatMeter(call, chat, cache_key)
    chunks = relay.relay(call, relay.prepend(first, upstream), meter, upstream.aclose)

    async def on_close() -> None:  # the response ended before the relay started
        await upstream.aclose()
        if not call.finished:
            call.charge(meter.usage(relay.Outcome.CANCELLED)[0], estimated=True)
            await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)

    return StreamingResponse(
        chunks, headers=render.stream_headers(call, final=False), on_close=on_close
    )


# The vendor leg of a whole chat-shaped answer, declared once (chat completions, Responses).
CHAT_LEG: Leg[ChatRequest, JSON] = Leg(worst_case=worst_case, send=send_chat, bill=completion_usage)

# The routes of this module, for the app's table (config.asgi).
ROUTES = (route("/v1/chat/completions", methods={"POST": chat_completions}, confirms_key=True),)
