"""``POST /v1/chat/completions``: validate → limit → (cache) → route → hold → call → settle.

Streams are relayed chunk by chunk as the vendor sends them; the relay's ``finally`` settles
for what was delivered on every exit (normal end, vendor failure after the first byte, client
disconnect), and the consumer calls ``on_close`` even when the relay never started.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from django.conf import settings

from billing.pricing import Usage
from catalog.routing import RoutingRequest
from inference import response_cache, tokens
from inference.chat.validation import ChatRequest, parse_chat_request
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.pipeline import Call, spawn
from inference.vendors import sse
from inference.vendors.base import JSON
from inference.vendors.errors import VendorError, VendorUnavailable

ENDPOINT = "chat.completions"


def _completion_id(call: Call) -> str:
    return "chatcmpl-" + call.request.request_id.removeprefix("req_")


def usage_from(body: JSON) -> Usage | None:
    """The usage a chat completion (or chunk) reports, if any."""
    usage = body.get("usage")
    if not isinstance(usage, dict) or usage.get("prompt_tokens") is None:
        return None
    details = usage.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        cached_input_tokens=int(details.get("cached_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
    )


def _openai_usage(usage: Usage) -> JSON:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
    }


def _message_text(message: JSON) -> str:
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(str(function.get("name") or "") + str(function.get("arguments") or ""))
    return "".join(parts)


def estimate_usage(chat: ChatRequest, completion_text: str) -> Usage:
    """Our own count (cl100k_base) of a call whose vendor reported no usage."""
    return Usage(
        input_tokens=tokens.count_messages(chat.payload["messages"]),
        output_tokens=tokens.count_text(completion_text),
    )


def routing_request(chat: ChatRequest, cap: int) -> RoutingRequest:
    """What routing needs of a chat request whose output is capped at ``cap`` tokens; the
    expected usage (for cost ranking) assumes at most 512 output tokens per choice."""
    return RoutingRequest(
        model=chat.model,
        capabilities=chat.capabilities,
        params=chat.params,
        task=chat.task,
        prefer=chat.prefer,
        expected_usage=Usage(
            input_tokens=chat.prompt_tokens_likely, output_tokens=min(cap, 512) * chat.n
        ),
    )


def _worst_case(chat: ChatRequest, cap: int) -> Usage:
    return Usage(input_tokens=chat.prompt_tokens_upper, output_tokens=cap * chat.n)


async def chat_completions(request: ApiRequest) -> Response | StreamingResponse:
    """The endpoint. See the module docstring."""
    chat = parse_chat_request(request.json())
    call = Call(request=request, endpoint=ENDPOINT, requested_model=chat.model, stream=chat.stream)
    call.prompt = str(chat.payload["messages"])[:20000]
    cap = chat.max_output_tokens or settings.INFRAI_DEFAULT_MAX_TOKENS
    payload = dict(chat.payload)
    if chat.max_output_tokens is None:
        payload["max_tokens"] = cap
    await call.limit(tokens=chat.prompt_tokens_likely + cap * chat.n)

    key = None
    if chat.cache_allowed and chat.deterministic:
        key = response_cache.cache_key(
            organization_id=call.key.organization_id,
            endpoint=ENDPOINT,
            payload=chat.payload,
            extra=[chat.task, chat.prefer],
        )
        hit = await response_cache.lookup(key)
        if hit is not None:
            return await _answer_from_cache(call, chat, hit)

    await call.route(routing_request(chat, cap))
    await call.hold(worst_case=lambda _candidate: _worst_case(chat, cap))
    async with call.closed_on_failure():
        if chat.stream:
            return await _open_stream(call, chat, payload)
        body = await call.call(lambda adapter, target, _c: adapter.chat(target, payload))
    usage = usage_from(body)
    estimated = usage is None
    if usage is None:
        text = "".join(_message_text(c.get("message") or {}) for c in body.get("choices", []))
        usage = estimate_usage(chat, text)
    call.charge(usage, estimated=estimated)
    body["id"] = _completion_id(call)
    body["object"] = "chat.completion"
    body["model"] = call.served()["model"]
    body["usage"] = _openai_usage(usage)
    await call.finish(status=RequestStatus.OK, http_status=200)
    if key is not None and not estimated:
        entry = {"body": {k: v for k, v in body.items() if k != "infrai"}, **call.served()}
        spawn(response_cache.store(key, entry))
    body["infrai"] = call.infrai()
    return json_response(body, headers=call.headers())


async def _answer_from_cache(
    call: Call, chat: ChatRequest, hit: dict[str, Any]
) -> Response | StreamingResponse:
    """A cached answer: costs nothing, logged like any call, streamed if asked."""
    call.cache_hit = True
    call.cached = {k: hit[k] for k in ("vendor", "model", "region", "routing", "ignored_params")}
    body = dict(hit["body"])
    usage = usage_from(body) or Usage()
    call.charge(usage)
    body["id"] = _completion_id(call)
    await call.finish(status=RequestStatus.OK, http_status=200)
    if not chat.stream:
        body["infrai"] = call.infrai()
        return json_response(body, headers=call.headers())
    return StreamingResponse(_replay(call, chat, body), headers=_stream_headers(call, final=True))


async def _replay(call: Call, chat: ChatRequest, body: JSON) -> AsyncIterator[bytes]:
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body.get("created", int(time.time())),
        "model": body["model"],
    }
    for choice in body.get("choices", []):
        message = choice.get("message") or {}
        delta: JSON = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(message["tool_calls"])]
        yield sse.encode(
            {
                **base,
                "choices": [
                    {"index": choice.get("index", 0), "delta": delta, "finish_reason": None}
                ],
            }
        )
        yield sse.encode(
            {
                **base,
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": {},
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
        )
    final: JSON = {**base, "choices": [], "infrai": call.infrai()}
    if chat.include_usage:
        final["usage"] = body.get("usage")
    yield sse.encode(final)
    yield sse.DONE


def _stream_headers(call: Call, *, final: bool) -> dict[str, str]:
    return {**call.headers(final=final), "cache-control": "no-cache", "x-accel-buffering": "no"}


async def open_upstream_stream(
    call: Call, payload: JSON
) -> tuple[AsyncGenerator[JSON, None], JSON]:
    """Fail over until a vendor produces its first chunk; returns its stream and that chunk.

    Nothing has reached the client yet, so every failure up to here may move on to the next
    candidate. The caller owns the returned stream (closing it cancels the upstream request).
    """

    async def first_chunk(
        adapter: Any, target: Any, _candidate: Any
    ) -> tuple[AsyncGenerator[JSON, None], JSON]:
        upstream = adapter.stream_chat(target, payload)
        try:
            first = await upstream.__anext__()
        except StopAsyncIteration:
            raise VendorUnavailable("the vendor ended the stream before any chunk") from None
        except BaseException:
            await upstream.aclose()
            raise
        return upstream, first

    return await call.call(first_chunk)


async def upstream_chunks(
    call: Call, first: JSON, upstream: AsyncGenerator[JSON, None], failed: list[VendorError]
) -> AsyncIterator[JSON]:
    """``first`` then the vendor's chunks. A vendor failure ends the iteration: it is appended
    to ``failed`` and the circuit breaker hears of it (the response has started: no failover)."""
    yield first
    while True:
        try:
            chunk = await upstream.__anext__()
        except StopAsyncIteration:
            return
        except VendorError as exc:
            failed.append(exc)
            call.vendor_failed_midway()
            return
        yield chunk


async def _open_stream(call: Call, chat: ChatRequest, payload: JSON) -> StreamingResponse:
    """Open the upstream stream, then hand the relay to the consumer."""
    upstream, first = await open_upstream_stream(call, payload)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    relay = _relay(call, chat, upstream, first)

    async def on_close() -> None:
        await upstream.aclose()
        if not call.finished:
            call.charge(
                Usage(input_tokens=tokens.count_messages(chat.payload["messages"])), estimated=True
            )
            await call.finish(status=RequestStatus.CANCELLED, http_status=499)

    return StreamingResponse(relay, headers=_stream_headers(call, final=False), on_close=on_close)


async def _relay(
    call: Call, chat: ChatRequest, upstream: AsyncGenerator[JSON, None], first: JSON
) -> AsyncIterator[bytes]:
    completion_id = _completion_id(call)
    model = call.served()["model"]
    delivered: list[str] = []
    vendor_usage: Usage | None = None
    error: VendorError | None = None
    status, error_code = RequestStatus.CANCELLED, "client_disconnected"
    call.streaming(lambda: estimate_usage(chat, "".join(delivered)))
    failed: list[VendorError] = []
    try:
        async for chunk in upstream_chunks(call, first, upstream, failed):
            usage = usage_from(chunk)
            if usage is not None:
                vendor_usage = usage
            if not chunk.get("choices"):
                continue
            chunk.pop("usage", None)
            chunk["id"], chunk["model"] = completion_id, model
            yield sse.encode(chunk)
            delivered.append("".join(_message_text(c.get("delta") or {}) for c in chunk["choices"]))
        error = failed[0] if failed else None
        if error is None and vendor_usage is not None:
            call.charge(vendor_usage)
        else:
            call.charge(estimate_usage(chat, "".join(delivered)), estimated=True)
        if error is not None:
            status, error_code = RequestStatus.VENDOR_ERROR, "vendor_stream_interrupted"
        else:
            status, error_code = RequestStatus.OK, ""
        # Settle before the last chunk: a client that reads [DONE] sees its ledger entry.
        await upstream.aclose()
        await call.finish(status=status, http_status=200, error_code=error_code)
        final: JSON = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "infrai": call.infrai(),
        }
        if chat.include_usage:
            final["usage"] = _openai_usage(call.usage)
        yield sse.encode(final)
        if error is not None:
            yield sse.encode(
                {
                    "error": {
                        "message": "The vendor's stream broke after the response started "
                        f"({error.kind}); you were billed for what was delivered.",
                        "type": "api_error",
                        "code": "vendor_stream_interrupted",
                        "param": None,
                    }
                }
            )
        else:
            yield sse.DONE
    finally:
        await upstream.aclose()  # cancels the upstream request if it is still running
        if not call.finished:
            if status is RequestStatus.CANCELLED:
                call.charge(estimate_usage(chat, "".join(delivered)), estimated=True)
            await call.finish(status=status, http_status=200, error_code=error_code)


route("/v1/chat/completions", methods={"POST": chat_completions})
