"""A fake Anthropic Messages API on 127.0.0.1 that thinks: every answer opens with a ``thinking``
block carrying a ``signature`` (as Claude's extended thinking does), then the text
``"Echo: <last user text>"``.

It keeps what it received — ``requests`` (bodies) and ``headers`` (each request's headers,
lower-case) — and ``sent``, the ``data:`` payloads of the last stream exactly as written, so a
test can compare what reached the client byte for byte; ``cut_after`` drops a stream's
connection after that many events. Usage counts one token per word:
``input_tokens`` of the user text (less ``cache_read`` tokens reported as read from the cache),
``output_tokens`` of the thinking and the reply.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer

THINKING = "The user wants an echo; I will echo."
# Opaque and full of characters a re-encoding could change: it must arrive as it left.
SIGNATURE = "EqQBCkgIARABGAIiQPv+/3xzZ\\u00e9==\u2603/ErUBCkYIBBgCIkA+Zm9v"


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


@dataclass
class FakeAnthropic(ThreadedServer):
    """The fake (see the module docstring); ``cache_read`` tokens are reported as cache reads."""

    api_key: str = "sk-ant-native-test"
    cache_read: int = 0
    cut_after: int | None = None  # drop the connection after this many stream events
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.serve_on_free_port("fake-anthropic")

    def reset(self) -> None:
        self.cache_read = 0
        self.cut_after = None
        self.requests, self.headers, self.sent = [], [], []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/messages", self.messages)

    def _usage(self, body: dict[str, Any], text: str) -> tuple[dict[str, Any], int]:
        prompt = len(_last_user_text(body["messages"]).split())
        output = len(THINKING.split()) + len(text.split())
        usage = {
            "input_tokens": prompt - self.cache_read,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation_input_tokens": 0,
            "output_tokens": output,
        }
        return usage, output

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if request.headers.get("x-api-key") != self.api_key:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return web.json_response({"type": "error", "error": error}, status=401)
        text = "Echo: " + _last_user_text(body["messages"])
        usage, output = self._usage(body, text)
        thinking = {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "msg_native_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": [thinking, {"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        self.sent = []

        class Cut(Exception):
            pass

        async def send(event: dict[str, Any]) -> None:
            if self.cut_after is not None and len(self.sent) >= self.cut_after:
                request.transport.close()  # type: ignore[union-attr]
                raise Cut
            data = json.dumps(event)
            self.sent.append(data)
            await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())

        with contextlib.suppress(Cut):  # the connection was dropped on purpose
            await self._stream(body, text, usage, output, send)
        return response

    async def _stream(
        self,
        body: dict[str, Any],
        text: str,
        usage: dict[str, Any],
        output: int,
        send: Any,
    ) -> None:
        start = {"id": "msg_native_fake", "type": "message", "role": "assistant",
                 "model": body["model"], "content": [], "stop_reason": None,
                 "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}  # fmt: skip
        await send({"type": "message_start", "message": start})
        empty = {"type": "thinking", "thinking": "", "signature": ""}
        await send({"type": "content_block_start", "index": 0, "content_block": empty})
        for i, word in enumerate(THINKING.split(" ")):
            delta = {"type": "thinking_delta", "thinking": word if i == 0 else " " + word}
            await send({"type": "content_block_delta", "index": 0, "delta": delta})
        signed = {"type": "signature_delta", "signature": SIGNATURE}
        await send({"type": "content_block_delta", "index": 0, "delta": signed})
        await send({"type": "content_block_stop", "index": 0})
        block = {"type": "text", "text": ""}
        await send({"type": "content_block_start", "index": 1, "content_block": block})
        for i, word in enumerate(text.split(" ")):
            delta = {"type": "text_delta", "text": word if i == 0 else " " + word}
            await send({"type": "content_block_delta", "index": 1, "delta": delta})
        await send({"type": "content_block_stop", "index": 1})
        end = {"stop_reason": "end_turn", "stop_sequence": None}
        await send({"type": "message_delta", "delta": end, "usage": {"output_tokens": output}})
        await send({"type": "message_stop"})
