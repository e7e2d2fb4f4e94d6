"""Fake vendors: real HTTP servers on 127.0.0.1 speaking the OpenAI and Anthropic wire formats.

A :class:`FakeVendor` runs an aiohttp server in its own thread. Tests steer it through
attributes: ``fail_statuses`` (statuses to answer before behaving), ``stall_s`` (sleep before
answering), ``cut_after`` (drop the connection after N streamed chunks), ``omit_usage``,
``chunk_delay_s``, ``images_b64_only`` (answer images as ``b64_json`` whatever was asked, like
vendors without image URLs) and ``fault`` (a vendor misbehaving on chat: one of
:data:`FAULTS`). Every request body it received is kept in ``requests``.

Answers are deterministic: the reply to a user message is ``"Echo: <text>"`` split into one
chunk per word; usage counts one token per word of the prompt and of the reply. Embeddings are
unit vectors derived from each input (8 dimensions unless ``dimensions`` is sent), usage one
token per word (or per token id); images are tiny PNGs (:func:`png_bytes`) served at
``/v1/files/<name>.png`` when answered as a URL.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer

SPEECH_CHUNKS = 8
# What ``FakeVendor.fault`` can make a chat answer do. ``usage_*`` corrupt the usage (a stream
# then reports usage even without ``include_usage``); the stream faults strike after the role
# chunk and two content chunks.
FAULTS = (
    "usage_negative",  # completion_tokens = -5
    "usage_garbage",  # prompt_tokens = "many"
    "usage_cached_over",  # cached_tokens > prompt_tokens
    "usage_huge",  # completion_tokens = 10**30
    "usage_zero",  # prompt_tokens = completion_tokens = 0
    "usage_absurd",  # completion_tokens = 99,999,999 (well-formed, under MAX_COUNT)
    "usage_reasoning",  # + reasoning_tokens hidden tokens, reported in completion_tokens_details
    "ignores_max_tokens",  # 200 one-token words whatever max_tokens says, usage claims 10
    "huge_chunks",  # 10 content chunks of 5,000 one-token words each, usage claims 10
    "error_string_chunk",  # data: {"error": "text"}
    "array_chunk",  # data: [1, 2]
    "not_json_chunk",  # data: {broken
    "no_done",  # the whole answer and its usage, but no [DONE]
    "hang",  # stops sending (holds the connection open for hang_s)
)


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(p.get("text", "") for p in content or [] if p.get("type") == "text")
    return ""


def png_bytes(seed: str) -> bytes:
    """A valid 2x2 RGB PNG whose colour is derived from ``seed``."""
    red, green, blue = hashlib.sha256(seed.encode()).digest()[:3]
    rows = b"".join(b"\x00" + bytes([red, green, blue]) * 2 for _ in range(2))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def fake_embedding(item: str | list[int], dimensions: int) -> list[float]:
    """A deterministic unit vector for one embeddings input."""
    digest = hashlib.sha256(json.dumps(item).encode()).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


def _count_words(messages: list[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):
            total += sum(len(p.get("text", "").split()) for p in content if p.get("type") == "text")
            total += sum(85 for p in content if p.get("type") in ("image_url", "image"))
    return total


@dataclass
class FakeVendor(ThreadedServer):
    """One fake vendor server (OpenAI-compatible and Anthropic routes on the same port)."""

    models: list[str] = field(default_factory=lambda: ["fake-model"])
    # The address it listens on: 127.0.0.1, or one that other network namespaces reach.
    host: str = "127.0.0.1"
    fail_statuses: list[int] = field(default_factory=list)
    stall_s: float = 0.0
    cut_after: int | None = None
    omit_usage: bool = False
    chunk_delay_s: float = 0.0
    images_b64_only: bool = False
    fault: str = ""
    hang_s: float = 30.0
    fail_code: str = ""  # the OpenAI error code of fail_statuses' answers ("model_loading" …)
    reasoning_tokens: int = 0  # the hidden reasoning of fault "usage_reasoning"
    # Prompt cache: of each chat/messages prompt, ``cache_reads`` tokens read from the cache and
    # ``cache_writes_5m`` / ``cache_writes_1h`` written to it, reported in each wire format's
    # own semantics (OpenAI: parts of prompt_tokens; Anthropic: apart from input_tokens).
    cache_reads: int = 0
    cache_writes_5m: int = 0
    cache_writes_1h: int = 0
    # A usage object sent on the stream's first (role) chunk, as vLLM's continuous usage does.
    early_usage: dict[str, Any] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    stream_closed: threading.Event = field(default_factory=threading.Event)
    chunks_sent: int = 0

    def __post_init__(self) -> None:
        self.serve_on_free_port("fake-vendor", self.host)

    # --- lifecycle ------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget requests and behaviours (between tests)."""
        self.fail_statuses = []
        self.stall_s = 0.0
        self.cut_after = None
        self.omit_usage = False
        self.chunk_delay_s = 0.0
        self.images_b64_only = False
        self.fault = ""
        self.hang_s = 30.0
        self.fail_code = ""
        self.reasoning_tokens = 0
        self.cache_reads = self.cache_writes_5m = self.cache_writes_1h = 0
        self.early_usage = None
        self.requests = []
        self.chunks_sent = 0
        self.stream_closed.clear()

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/v1/models", self.list_models)
        router.add_post("/v1/chat/completions", self.chat)
        router.add_post("/v1/messages", self.messages)
        router.add_post("/v1/audio/speech", self.speech)
        router.add_post("/v1/embeddings", self.embeddings)
        router.add_post("/v1/images/generations", self.images)
        router.add_get("/v1/files/{name}.png", self.image_file)

    # --- helpers --------------------------------------------------------------------------
    async def _gate(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body = await request.json()
        self.requests.append(body)
        # What this request gets is decided when it arrives: a request stalled by an earlier
        # test must not wake up into a later test and take the failure that test set up.
        status = self.fail_statuses.pop(0) if self.fail_statuses else None
        if self.stall_s:
            await asyncio.sleep(self.stall_s)
        if status is not None:
            error = {"error": {"message": f"fake failure {status}", "type": "server_error"}}
            headers = {}
            if self.fail_code:
                error["error"]["code"] = self.fail_code
                headers["retry-after"] = "7"
            return body, web.json_response(error, status=status, headers=headers)
        return body, None

    def _reply(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]] | None]:
        tools = body.get("tools")
        if tools and body.get("tool_choice") != "none":
            names = [t["function"]["name"] if "function" in t else t["name"] for t in tools]
            calls = [
                {"id": f"call_{i}", "name": name, "arguments": json.dumps({"city": "Paris"})}
                for i, name in enumerate(names[:2])
            ]
            return "", calls
        fmt = body.get("response_format") or {}
        if fmt.get("type") in ("json_object", "json_schema"):
            return '{"ok": true}', None
        return "Echo: " + _last_user_text(body.get("messages", [])), None

    # --- OpenAI-compatible ---------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        text, calls = self._reply(body)
        prompt_tokens = _count_words(body.get("messages", []))
        words = text.split(" ") if text else []
        if self.fault == "ignores_max_tokens":
            words = ["word"] * 200
        elif self.fault == "huge_chunks":
            words = [" ".join(["word"] * 5000)] * 10
        text = " ".join(words) if words else text
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words) + len(calls or []),
            "total_tokens": prompt_tokens + len(words) + len(calls or []),
        }
        if self.cache_reads or self.cache_writes_5m or self.cache_writes_1h:
            # OpenAI's format has no cache lifetimes: every write is a cache_write_tokens.
            usage["prompt_tokens_details"] = {
                "cached_tokens": self.cache_reads,
                "cache_write_tokens": self.cache_writes_5m + self.cache_writes_1h,
            }
        self._corrupt(usage)
        n = int(body.get("n") or 1)
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls
                ]
            out: dict[str, Any] = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": i,
                        "message": message,
                        "finish_reason": "tool_calls" if calls else "stop",
                        "logprobs": None,
                    }
                    for i in range(n)
                ],
                "system_fingerprint": "fp_fake",
            }
            if not self.omit_usage and self.fault.startswith("usage_"):
                out["usage"] = usage
            elif not self.omit_usage:
                usage["completion_tokens"] *= n
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                out["usage"] = usage
            return web.json_response(out)
        return await self._stream_openai(request, body, words, calls, usage)

    def _corrupt(self, usage: dict[str, Any]) -> None:
        if self.fault == "usage_negative":
            usage["completion_tokens"] = -5
        elif self.fault == "usage_garbage":
            usage["prompt_tokens"] = "many"
        elif self.fault == "usage_cached_over":
            usage["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens"] + 100}
        elif self.fault == "usage_huge":
            usage["completion_tokens"] = 10**30
        elif self.fault == "usage_zero":
            usage["prompt_tokens"] = usage["completion_tokens"] = usage["total_tokens"] = 0
        elif self.fault == "usage_absurd":
            usage["completion_tokens"] = 99_999_999
        elif self.fault == "usage_reasoning":
            usage["completion_tokens"] += self.reasoning_tokens
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        elif self.fault in ("ignores_max_tokens", "huge_chunks"):
            usage["completion_tokens"] = 10

    async def embeddings(self, request: web.Request) -> web.Response:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        raw = body["input"]
        single = isinstance(raw, str) or (bool(raw) and isinstance(raw[0], int))
        items = [raw] if single else raw
        dimensions = int(body.get("dimensions") or 8)
        data = []
        for i, item in enumerate(items):
            vector = fake_embedding(item, dimensions)
            packed = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            embedding = packed if body.get("encoding_format") == "base64" else vector
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        used = sum(len(i.split()) if isinstance(i, str) else len(i) for i in items)
        out: dict[str, Any] = {"object": "list", "data": data, "model": body["model"]}
        if not self.omit_usage:
            out["usage"] = {"prompt_tokens": used, "total_tokens": used}
        return web.json_response(out)

    async def images(self, request: web.Request) -> web.Response:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        as_url = body.get("response_format", "url") == "url" and not self.images_b64_only
        data = []
        for i in range(int(body.get("n") or 1)):
            name = hashlib.sha256(f"{body['prompt']}|{i}".encode()).hexdigest()[:16]
            if as_url:
                data.append({"url": f"{self.url}/files/{name}.png", "revised_prompt": "fake"})
            else:
                data.append({"b64_json": base64.b64encode(png_bytes(name)).decode()})
        return web.json_response({"created": int(time.time()), "data": data})

    async def image_file(self, request: web.Request) -> web.Response:
        return web.Response(body=png_bytes(request.match_info["name"]), content_type="image/png")

    async def _stream_openai(self, request, body, words, calls, usage) -> web.StreamResponse:  # type: ignore[no-untyped-def]
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        self.stream_closed.clear()

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            obj = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        pieces = [chunk({"role": "assistant", "content": ""})]
        if self.early_usage is not None:
            first = json.loads(pieces[0][len(b"data: ") :])
            pieces[0] = b"data: " + json.dumps({**first, "usage": self.early_usage}).encode()
            pieces[0] += b"\n\n"
        for i, word in enumerate(words):
            pieces.append(chunk({"content": word if i == 0 else " " + word}))
        for i, call in enumerate(calls or []):
            pieces.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            half = len(call["arguments"]) // 2
            for part in (call["arguments"][:half], call["arguments"][half:]):
                pieces.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
                )
        pieces.append(chunk({}, "tool_calls" if calls else "stop"))
        include_usage = (body.get("stream_options") or {}).get("include_usage")
        forced = self.fault.startswith("usage_") or self.fault == "no_done"
        if (include_usage or forced) and not self.omit_usage:
            obj = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [],
                "usage": usage,
            }
            pieces.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
        if self.fault != "no_done":
            pieces.append(b"data: [DONE]\n\n")
        bad = {
            "error_string_chunk": b'data: {"error": "text"}\n\n',
            "array_chunk": b"data: [1, 2]\n\n",
            "not_json_chunk": b"data: {broken\n\n",
        }.get(self.fault)
        self.chunks_sent = 0
        try:
            for i, piece in enumerate(pieces):
                if self.cut_after is not None and i >= self.cut_after:
                    request.transport.close()  # type: ignore[union-attr]
                    return response
                if i == 3 and bad is not None:
                    await response.write(bad)
                if i == 3 and self.fault == "hang":
                    await asyncio.sleep(self.hang_s)
                await response.write(piece)
                self.chunks_sent += 1
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.stream_closed.set()
        return response

    async def speech(self, request: web.Request) -> web.StreamResponse:
        """Streams ``SPEECH_CHUNKS`` chunks of fake audio (honours ``cut_after``)."""
        _body, failure = await self._gate(request)
        if failure is not None:
            return failure
        response = web.StreamResponse(headers={"content-type": "audio/mpeg"})
        await response.prepare(request)
        self.chunks_sent = 0
        for i in range(SPEECH_CHUNKS):
            if self.cut_after is not None and i >= self.cut_after:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(bytes([i]) * 1024)
            self.chunks_sent += 1
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await response.write_eof()
        return response

    # --- Anthropic Messages ----------------------------------------------------------------
    def _anthropic_prompt_usage(self, prompt_tokens: int) -> dict[str, Any]:
        """The prompt part of an Anthropic usage: ``input_tokens`` excludes cache reads and
        writes, reported apart (the writes with their lifetimes)."""
        written = self.cache_writes_5m + self.cache_writes_1h
        usage: dict[str, Any] = {"input_tokens": prompt_tokens - self.cache_reads - written}
        if self.cache_reads or written:
            usage["cache_read_input_tokens"] = self.cache_reads
            usage["cache_creation_input_tokens"] = written
            usage["cache_creation"] = {
                "ephemeral_5m_input_tokens": self.cache_writes_5m,
                "ephemeral_1h_input_tokens": self.cache_writes_1h,
            }
        return usage

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        if not request.headers.get("x-api-key") or request.headers.get("anthropic-version") is None:
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "missing key"},
                },
                status=401,
            )
        converted = [
            {
                "role": m["role"],
                "content": [
                    b
                    for b in (
                        m["content"]
                        if isinstance(m["content"], list)
                        else [{"type": "text", "text": m["content"]}]
                    )
                    if b.get("type") in ("text", "image")
                ],
            }
            for m in body["messages"]
        ]
        text, calls = self._reply(
            {"messages": converted, "tools": body.get("tools"), "tool_choice": None}
        )
        prompt_tokens = _count_words(converted) + len((body.get("system") or "").split())
        words = text.split(" ") if text else []
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call in calls or []:
            content.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["name"],
                    "input": json.loads(call["arguments"]),
                }
            )
        usage = {
            **self._anthropic_prompt_usage(prompt_tokens),
            "output_tokens": len(words) + len(calls or []),
        }
        stop = "tool_use" if calls else "end_turn"
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": content,
                    "stop_reason": stop,
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(
                f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()
            )

        await send(
            "message_start",
            {
                "message": {
                    "id": "msg_fake",
                    "usage": {**self._anthropic_prompt_usage(prompt_tokens), "output_tokens": 0},
                }
            },
        )
        index = 0
        if words:
            await send(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
            for i, word in enumerate(words):
                await send(
                    "content_block_delta",
                    {
                        "index": 0,
                        "delta": {"type": "text_delta", "text": word if i == 0 else " " + word},
                    },
                )
            await send("content_block_stop", {"index": 0})
            index = 1
        for call in calls or []:
            await send(
                "content_block_start",
                {
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": {},
                    },
                },
            )
            await send(
                "content_block_delta",
                {
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": call["arguments"]},
                },
            )
            await send("content_block_stop", {"index": index})
            index += 1
        await send(
            "message_delta",
            {"delta": {"stop_reason": stop}, "usage": {"output_tokens": usage["output_tokens"]}},
        )
        await send("message_stop", {})
        await response.write_eof()
        return response
