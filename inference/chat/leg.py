"""The chat-shaped call every chat dialect shares (chat completions, Responses, Messages): how
it routes, what it holds, what it sends a candidate, what it bills, and how its stream is
counted. The dialects differ only in how they parse and render (their endpoints).

When the caller gives no ``max_tokens``, a model with a default output limit in the catalog
(``default_output_tokens``, the local models' 512) is sent that as ``max_tokens`` and held for
it — never the whole context; for any other model none is sent and the hold is sized per
candidate from the model's own output limit and context window, never a fixed 4096.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Iterable
from typing import Any, Protocol

from django.conf import settings

from catalog.routing import Candidate, RoutingRequest
from inference import relay, response_cache, stages, tokens
from inference.call import Call
from inference.chat.validation import ChatRequest
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
    reconcile,
    stream_cut_tokens,
)
from inference.vendors.base import JSON, Adapter, VendorTarget
from inference.vendors.errors import VendorUnavailable
from money.pricing import Usage, worst_case_usage


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


def worst_case(chat: ChatRequest, candidate: Candidate, *, cache_writes: bool = False) -> Usage:
    """The most a call to ``candidate`` can consume (the hold): the prompt's upper bound and
    the output cap, split the dearest way the vendor could report them (reasoning; cache
    writes when the request marks its prompt for caching, ``cache_writes``: a chat request
    cannot: :func:`money.pricing.worst_case_usage`)."""
    return worst_case_usage(
        candidate.price,
        input_tokens=chat.prompt_tokens_upper,
        output_tokens=output_cap(chat, candidate) * chat.n,
        cache_writes=cache_writes,
    )


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

    def read_first_choice(self, item: Any) -> None:
        """For a meter that relays a chunk's first choice only (Responses, Messages): refuse
        garbage (:class:`~inference.relay.MalformedChunk`), keep the chunk's usage report and
        count the first choice's text."""
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
        for choice in choices or ():
            if choice.get("index", 0) == 0:
                self.count.add(message_text(choice.get("delta") or {}))


class Translator(Protocol):
    """A dialect's stream translator (Responses, Messages): chat chunks in, its events out."""

    finish_reason: str | None

    def start(self) -> list[bytes]: ...

    def feed(self, chunk: JSON) -> list[bytes]: ...


class TranslatingMeter(CountingMeter):
    """The meter of a chat stream relayed as another dialect's events by ``translator``: the
    first choice only (:meth:`CountingMeter.read_first_choice`); a stream the relay cuts at the
    output cap ends as the cap does (``finish_reason`` "length"). A dialect adds its
    :meth:`tail`."""

    def __init__(self, call: Call, chat: ChatRequest, translator: Translator) -> None:
        super().__init__(call, chat, output_limit(call, chat))
        self.translator = translator

    def start(self) -> Iterable[bytes]:
        return self.translator.start()

    def feed(self, item: Any) -> Iterable[bytes]:
        self.read_first_choice(item)
        events = self.translator.feed(item)
        if self.count.over and not self.complete():
            self.cut = True
            self.translator.finish_reason = "length"
            raise relay.OutputCapReached(events)
        return events

    def complete(self) -> bool:
        return self.translator.finish_reason is not None


# The vendor leg of a whole chat-shaped answer, declared once (chat completions, Responses).
CHAT_LEG: Leg[ChatRequest, JSON] = Leg(worst_case=worst_case, send=send_chat, bill=completion_usage)
