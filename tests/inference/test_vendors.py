"""Adapters as wire-format mappings, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest
from aiohttp import web

from inference.vendors import anthropic, errors
from inference.vendors.base import VendorTarget
from inference.vendors.openai_compat import OpenAICompatibleAdapter

TARGET = VendorTarget(
    vendor="v", base_url="http://vendor.test/v1", upstream_model="up", api_key="sk-x"
)


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (429, errors.VendorRateLimited, True),
        (500, errors.VendorServerError, True),
        (503, errors.VendorServerError, True),
        (401, errors.VendorMisconfigured, True),
        (404, errors.VendorMisconfigured, True),
        (400, errors.VendorRejected, False),
        (422, errors.VendorRejected, False),
    ],
)
def test_vendor_statuses_map_to_retryable_or_not(status, kind, retryable):
    err = errors.from_status(status, "m", vendor="v")
    assert isinstance(err, kind) and err.retryable is retryable


async def _against(handler, call):
    """Run ``call(target)`` against a real HTTP server on 127.0.0.1 answering with ``handler``."""
    app = web.Application()
    app.router.add_route("*", "/v1/{path:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await call(dataclasses.replace(TARGET, base_url=f"http://127.0.0.1:{port}/v1"))
    finally:
        await runner.cleanup()


def test_openai_adapter_sends_the_upstream_model_and_the_key():
    seen = {}

    async def handler(request: web.Request) -> web.Response:
        seen["path"] = request.path
        seen["body"] = await request.json()
        seen["auth"] = request.headers["authorization"]
        return web.json_response(
            {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 1}}
        )

    body = asyncio.run(
        _against(
            handler,
            lambda target: OpenAICompatibleAdapter().chat(
                target,
                {"model": "canonical", "messages": [], "stream_options": {"include_usage": True}},
            ),
        )
    )
    assert body["choices"][0]["message"]["content"] == "ok"
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"]["model"] == "up" and "stream_options" not in seen["body"]
    assert seen["auth"] == "Bearer sk-x"


def test_openai_adapter_translates_errors_and_transport_failures():
    async def bad(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "bad thing"}}, status=400)

    with pytest.raises(errors.VendorRejected, match="bad thing"):
        asyncio.run(_against(bad, lambda t: OpenAICompatibleAdapter().chat(t, {"messages": []})))

    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        closed = dataclasses.replace(
            TARGET, base_url=f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        )
    with pytest.raises(errors.VendorUnavailable):
        asyncio.run(OpenAICompatibleAdapter().chat(closed, {"messages": []}))


def test_a_stream_line_beyond_the_read_buffer_is_a_protocol_error_not_a_crash():
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: " + b"x" * (5 << 20) + b"\n\n")
        return response

    async def drain(target):
        return [c async for c in OpenAICompatibleAdapter().stream_chat(target, {"messages": []})]

    with pytest.raises(errors.VendorProtocolError):
        asyncio.run(_against(huge, drain))


def test_openai_to_anthropic_request_mapping():
    payload = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 1.5,
        "stop": "END",
        "max_tokens": 10,
    }
    body = anthropic.to_anthropic(payload, model="claude", stream=True)
    assert body["system"] == "be brief" and body["max_tokens"] == 10 and body["stream"] is True
    assert body["temperature"] == 1.0  # Anthropic's range ends at 1
    assert body["stop_sequences"] == ["END"]
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
    }
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "42"}
    ]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


def test_anthropic_response_and_stream_mapping():
    reply = {
        "id": "msg",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"x": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 3, "output_tokens": 2},
    }
    out = anthropic.from_anthropic(reply, model="claude")
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": '{"x": 1}',
    }
    assert out["usage"] == {
        "prompt_tokens": 8,
        "completion_tokens": 2,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
    t = anthropic.ChunkTranslator("claude")
    chunks = [
        *t.feed(
            "message_start",
            {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 4}}},
        ),
        *t.feed(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"},
            },
        ),
        *t.feed(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {"output_tokens": 1},
            },
        ),
        *t.feed("message_stop", {"type": "message_stop"}),
    ]
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hel"}
    assert chunks[2]["choices"][0]["finish_reason"] == "length"
    assert chunks[3]["usage"]["prompt_tokens"] == 4 and chunks[3]["usage"]["completion_tokens"] == 1


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_stream_lines_split_across_reads_in_any_line_ending(ending):
    """SSE lines may end in \\n, \\r\\n or \\r and arrive cut anywhere, a \\r\\n included."""
    events = [
        b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}',
        b"data: [DONE]",
    ]
    wire = b"".join(e + ending + ending for e in events)

    async def dribble(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i in range(0, len(wire), 3):  # three bytes per write: every cut happens
            await response.write(wire[i : i + 3])
            await asyncio.sleep(0)
        return response

    async def collect(target):
        return [c async for c in OpenAICompatibleAdapter().stream_chat(target, {"messages": []})]

    chunks = asyncio.run(_against(dribble, collect))
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["a", "b"]


def test_the_vendor_session_caps_no_connections():
    """Each open stream holds a vendor connection for as long as it runs: a cap on the pool
    would make every stream beyond it wait, without a word, for another to end."""

    async def connector_limits():
        from inference.vendors import http

        try:
            connector = http.session().connector
            return connector.limit, connector.limit_per_host
        finally:
            await http.close()

    assert asyncio.run(connector_limits()) == (0, 0)


# --- tool-call ids that cross vendors -------------------------------------------------------
# A Gemini call id carries its thought signature (base64: '+', '/', '='), far over OpenAI's 40.
GEMINI_ID = "call_0123456789abcdef01234567__thought__" + "Q2lnbmF0dXJl+/=" * 20
TOOL_HISTORY = [
    {"role": "user", "content": "weather?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": GEMINI_ID, "type": "function",
             "function": {"name": "weather", "arguments": "{}"}},
            {"id": "call_short", "type": "function",
             "function": {"name": "time", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": GEMINI_ID, "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_short", "content": "noon"},
]  # fmt: skip


def test_portable_tool_ids_keep_good_ids_and_map_others_the_same_way_every_time():
    from inference.vendors.base import portable_tool_id, portable_tool_ids

    assert portable_tool_id("call_short") == "call_short"
    mapped = portable_tool_id(GEMINI_ID)
    assert mapped == portable_tool_id(GEMINI_ID) and len(mapped) <= 40
    assert mapped.startswith("call_") and mapped.replace("_", "").isalnum()
    assert portable_tool_id("x" * 41) != "x" * 41 and portable_tool_id("a.b") != "a.b"
    clean = [{"role": "user", "content": "hi"}]
    assert portable_tool_ids(clean) is clean
    out = portable_tool_ids(TOOL_HISTORY)
    assert [c["id"] for c in out[1]["tool_calls"]] == [mapped, "call_short"]
    assert [m["tool_call_id"] for m in out[2:]] == [mapped, "call_short"]
    assert TOOL_HISTORY[2]["tool_call_id"] == GEMINI_ID  # the caller's list is not changed


def test_every_other_wire_format_gets_ids_it_accepts_and_gemini_gets_signatures():
    """A conversation begun on Gemini fails over (or moves) to OpenAI, Anthropic or Bedrock:
    each receives ids within its rules, a call still matching its result; back on Gemini, its
    own call carries its signature and a foreign one the documented placeholder."""
    from inference.vendors import bedrock, gemini
    from inference.vendors.openai_compat import chat_payload

    payload = {"model": "m", "messages": TOOL_HISTORY}
    sent = chat_payload(TARGET, payload, stream=False)["messages"]
    assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] != GEMINI_ID
    assert all(len(c["id"]) <= 40 for c in sent[1]["tool_calls"])

    body = anthropic.to_anthropic(payload, model="claude", stream=False)
    uses = [b["id"] for b in body["messages"][1]["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    assert uses == results and all(len(i) <= 40 and "+" not in i for i in uses)

    converse = bedrock.to_converse(payload, model="anthropic.claude")
    ids = [b["toolUse"]["toolUseId"] for b in converse["messages"][1]["content"]]
    assert ids == [b["toolResult"]["toolUseId"] for b in converse["messages"][2]["content"]]
    assert all(len(i) <= 40 and "/" not in i for i in ids)

    contents = gemini.to_gemini(payload)["contents"]
    calls = [p for p in contents[1]["parts"] if "functionCall" in p]
    assert calls[0]["thoughtSignature"] == GEMINI_ID.partition(gemini.SIGNATURE_MARK)[2]
    assert calls[1]["thoughtSignature"] == gemini.FOREIGN_CALL_SIGNATURE
