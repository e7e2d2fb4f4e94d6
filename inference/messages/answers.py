"""Infrai's answers in the shapes of Anthropic's Messages API, as pure functions.

:func:`message_object` renders a ``chat.completion`` as a ``message``; :class:`StreamTranslator`
turns ``chat.completion.chunk`` dicts into Anthropic's stream events (``message_start`` …
``content_block_*`` … :func:`stream_end`: ``message_delta``, ``message_stop``; or
:func:`stream_failed`: ``error``); :func:`error_body` renders an error in Anthropic's shape;
:func:`anthropic_usage` renders usage in Anthropic's semantics. The request side is
:mod:`inference.messages.translate`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from inference.vendors.base import JSON
from money.pricing import Usage

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's error type per HTTP status (its "Errors" page); 402 is its billing error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP ``status`` (other 4xx: invalid request; 5xx: api)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(status: int, message: str, *, code: str | None, param: str | None) -> JSON:
    """An error in Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``, with
    infrai's ``code`` and ``param`` beside them, as on every route (Anthropic's SDKs keep extra
    fields)."""
    error = {"type": error_type(status), "message": message, "code": code, "param": param}
    return {"type": "error", "error": error}


# --- messages ----------------------------------------------------------------------------------
def anthropic_usage(usage: Usage) -> JSON:
    """``usage`` (OpenAI's semantics) as Anthropic reports it: ``input_tokens`` excludes the
    cache reads (``cache_read_input_tokens``) and writes (``cache_creation_input_tokens``, split
    by lifetime in ``cache_creation``)."""
    read, five, hour = (
        usage.cached_input_tokens,
        usage.cache_write_5m_tokens,
        usage.cache_write_1h_tokens,
    )
    return {
        "input_tokens": max(usage.input_tokens - read - five - hour, 0),
        "cache_creation_input_tokens": five + hour,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour},
        "output_tokens": usage.output_tokens,
    }


def stop_reason(finish_reason: str | None) -> str:
    """Chat's ``finish_reason`` as Anthropic's ``stop_reason``."""
    return _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def _tool_input(arguments: Any) -> Any:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def content_blocks(completion: JSON) -> tuple[list[JSON], str | None]:
    """The content blocks of a ``chat.completion`` (first choice) and its finish reason."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    blocks: list[JSON] = []
    if message.get("content") or not message.get("tool_calls"):
        blocks.append({"type": "text", "text": str(message.get("content") or "")})
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or f"toolu_{i}"),
                "name": str(function.get("name") or ""),
                "input": _tool_input(function.get("arguments")),
            }
        )
    return blocks, choice.get("finish_reason")


def native_text(message: JSON) -> str:
    """What an Anthropic ``message`` delivers, for our count: its text, thinking, and tool
    names and inputs."""
    parts: list[str] = []
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "thinking":
            parts.append(str(block.get("thinking") or ""))
        elif kind == "tool_use":
            parts.append(str(block.get("name") or "") + json.dumps(block.get("input") or {}))
    return "".join(parts)


def native_delta_text(event: JSON) -> str:
    """What one ``content_block_delta`` event of an Anthropic stream delivers, for our count."""
    if event.get("type") != "content_block_delta":
        return ""
    delta = event.get("delta") or {}
    for key in ("text", "thinking", "partial_json"):
        if isinstance(delta.get(key), str):
            return str(delta[key])
    return ""


def message_object(*, message_id: str, model: str, completion: JSON, usage: Usage) -> JSON:
    """A ``chat.completion`` as Anthropic's ``message`` object (without ``infrai``)."""
    blocks, finish_reason = content_blocks(completion)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason(finish_reason),
        "stop_sequence": None,
        "usage": anthropic_usage(usage),
    }


# --- streams ----------------------------------------------------------------------------------
def sse_event(event: JSON) -> bytes:
    """One Server-Sent Event of the Messages stream (``event:`` is the event's type)."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


@dataclass
class StreamTranslator:
    """Chat chunks in, Anthropic's stream events out, in Anthropic's order.

    Call :meth:`start` once, :meth:`feed` per chunk, then :meth:`completed` or :meth:`failed`.
    ``input_tokens`` is our count of the prompt, sent in ``message_start`` (the billed figure
    follows in ``message_delta``, whose counts Anthropic's SDKs take as the totals).
    """

    message_id: str
    model: str
    input_tokens: int
    finish_reason: str | None = None
    _block: int = -1  # the index of the open content block (-1: none open)
    _open: bool = False
    _kind: str = ""
    _tools: dict[int, int] = field(default_factory=dict)  # chat tool-call index → block index

    def start(self) -> list[bytes]:
        """``message_start``, with our count of the input."""
        message: JSON = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage(Usage(input_tokens=self.input_tokens)),
        }
        return [sse_event({"type": "message_start", "message": message})]

    def _close(self) -> list[bytes]:
        if not self._open:
            return []
        self._open = False
        return [sse_event({"type": "content_block_stop", "index": self._block})]

    def _begin(self, block: JSON) -> list[bytes]:
        out = self._close()
        self._block += 1
        self._open, self._kind = True, block["type"]
        out.append(
            sse_event({"type": "content_block_start", "index": self._block, "content_block": block})
        )
        return out

    def _delta(self, index: int, delta: JSON) -> bytes:
        return sse_event({"type": "content_block_delta", "index": index, "delta": delta})

    def feed(self, chunk: JSON) -> list[bytes]:
        """The events of one chat chunk (its first choice)."""
        out: list[bytes] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if not (self._open and self._kind == "text"):
                    out.extend(self._begin({"type": "text", "text": ""}))
                out.append(self._delta(self._block, {"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                function = call.get("function") or {}
                index = int(call.get("index") or 0)
                if index not in self._tools:
                    block = {
                        "type": "tool_use",
                        "id": str(call.get("id") or f"toolu_{index}"),
                        "name": str(function.get("name") or ""),
                        "input": {},
                    }
                    out.extend(self._begin(block))
                    self._tools[index] = self._block
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    partial = {"type": "input_json_delta", "partial_json": arguments}
                    out.append(self._delta(self._tools[index], partial))
            if choice.get("finish_reason") is not None:
                self.finish_reason = str(choice["finish_reason"])
        return out

    def completed(self, usage: Usage, infrai: JSON) -> list[bytes]:
        """The end of a whole answer: the open block closed, then :func:`stream_end`."""
        return [*self._close(), *stream_end(stop_reason(self.finish_reason), usage, infrai)]


def stream_end(
    reason: str, usage: Usage, infrai: JSON, *, stop_sequence: str | None = None
) -> list[bytes]:
    """The last events of a whole answer: ``message_delta`` (stop reason, the billed usage and
    ``infrai``), ``message_stop``."""
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
        "usage": anthropic_usage(usage),
        "infrai": infrai,
    }
    return [sse_event(delta), sse_event({"type": "message_stop"})]


def stream_failed(infrai: JSON, message: str, code: str) -> list[bytes]:
    """An ``error`` event for a stream the vendor broke after it started (Anthropic's SDKs
    raise on it); it carries ``infrai``, what was billed for the part delivered."""
    body = error_body(502, message, code=code, param=None)
    body["error"]["infrai"] = infrai
    return [sse_event(body)]
