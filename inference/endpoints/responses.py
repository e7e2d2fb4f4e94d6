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
from collections.abc import AsyncGenerator, AsyncIterator

from django.conf import settings

from billing.pricing import Usage
from inference.chat.service import (
    estimate_usage,
    open_upstream_stream,
    routing_request,
    upstream_chunks,
    usage_from,
)
from inference.chat.validation import ChatRequest
from inference.endpoints import metered
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.pipeline import Call
from inference.responses.translate import (
    ResponsesRequest,
    StreamTranslator,
    output_items,
    parse_responses_request,
    response_object,
)
from inference.vendors.base import JSON
from inference.vendors.errors import VendorError

ENDPOINT = "responses"


def _response_id(call: Call) -> str:
    return "resp_" + call.request.request_id.removeprefix("req_")


def _completion_usage(chat: ChatRequest, body: JSON) -> tuple[Usage, bool]:
    usage = usage_from(body)
    if usage is not None:
        return usage, False
    message = (body.get("choices") or [{}])[0].get("message") or {}
    calls = message.get("tool_calls") or []
    text = str(message.get("content") or "") + "".join(
        str((c.get("function") or {}).get("arguments") or "") for c in calls
    )
    return estimate_usage(chat, text), True


async def responses(request: ApiRequest) -> Response | StreamingResponse:
    """The endpoint. See the module docstring."""
    parsed = parse_responses_request(request.json())
    chat = parsed.chat
    call = Call(request=request, endpoint=ENDPOINT, requested_model=chat.model, stream=chat.stream)
    call.prompt = str(chat.payload["messages"])[:20000]
    cap = chat.max_output_tokens or settings.INFRAI_DEFAULT_MAX_TOKENS
    payload = {**chat.payload, "max_tokens": cap}
    await call.limit(tokens=chat.prompt_tokens_likely + cap)
    await call.route(routing_request(chat, cap))
    worst = Usage(input_tokens=chat.prompt_tokens_upper, output_tokens=cap)
    await call.hold(worst_case=lambda _candidate: worst)
    if chat.stream:
        return await _open_stream(call, parsed, payload)
    body = await metered.call_and_settle(
        call,
        lambda adapter, target, _c: adapter.chat(target, payload),
        lambda answer: _completion_usage(chat, answer),
    )
    output, finish_reason = output_items(body)
    out = response_object(
        response_id=_response_id(call),
        created_at=int(time.time()),
        model=call.served()["model"],
        echo=parsed.echo,
        output=output,
        usage=call.usage,
        finish_reason=finish_reason,
    )
    out["infrai"] = call.infrai()
    return json_response(out, headers=call.headers())


async def _open_stream(call: Call, parsed: ResponsesRequest, payload: JSON) -> StreamingResponse:
    """Fail over until a vendor produces its first chunk, then hand the relay to the consumer."""

    async with call.closed_on_failure():
        upstream, first = await open_upstream_stream(call, payload)
    call.ttft_ms = (time.perf_counter_ns() - call.request.started_ns) // 1_000_000
    translator = StreamTranslator(
        response_id=_response_id(call), model=call.served()["model"], echo=parsed.echo
    )

    async def on_close() -> None:
        await upstream.aclose()
        if not call.finished:
            call.charge(estimate_usage(parsed.chat, translator.text), estimated=True)
            await call.finish(status=RequestStatus.CANCELLED, http_status=499)

    headers = {**call.headers(final=False), "cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(
        _relay(call, parsed.chat, translator, upstream, first), headers=headers, on_close=on_close
    )


async def _relay(
    call: Call,
    chat: ChatRequest,
    translator: StreamTranslator,
    upstream: AsyncGenerator[JSON, None],
    first: JSON,
) -> AsyncIterator[bytes]:
    vendor_usage: Usage | None = None
    error: VendorError | None = None
    status, error_code = RequestStatus.CANCELLED, "client_disconnected"
    call.streaming(lambda: estimate_usage(chat, translator.text))
    try:
        for event in translator.start():
            yield event
        failed: list[VendorError] = []
        async for chunk in upstream_chunks(call, first, upstream, failed):
            vendor_usage = usage_from(chunk) or vendor_usage
            for event in translator.feed(chunk):
                yield event
        error = failed[0] if failed else None
        if error is None and vendor_usage is not None:
            call.charge(vendor_usage)
        else:
            call.charge(estimate_usage(chat, translator.text), estimated=True)
        status = RequestStatus.OK if error is None else RequestStatus.VENDOR_ERROR
        error_code = "" if error is None else "vendor_stream_interrupted"
        # Settle before the last event: a client that reads it sees its ledger entry.
        await upstream.aclose()
        await call.finish(status=status, http_status=200, error_code=error_code)
        if error is None:
            final = translator.completed(call.usage, call.infrai())
        else:
            message = (
                f"The vendor's stream broke after the response started ({error.kind}); you "
                "were billed for what was delivered."
            )
            final = translator.failed(call.usage, call.infrai(), message)
        for event in final:
            yield event
    finally:
        await upstream.aclose()  # cancels the upstream request if it is still running
        if not call.finished:
            call.charge(estimate_usage(chat, translator.text), estimated=True)
            await call.finish(status=status, http_status=200, error_code=error_code)


route("/v1/responses", methods={"POST": responses})
