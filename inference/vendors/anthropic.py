"""Anthropic Messages API, translated to and from OpenAI chat with pure functions.

Covers text, images (URL and data URL), tools (definitions, calls, results, choice), streaming
(text and tool-argument deltas) and usage (cache reads and writes in OpenAI's semantics:
:func:`_usage`). ``/v1/messages`` requests are also sent as they are
(:meth:`AnthropicAdapter.messages`, :meth:`AnthropicAdapter.stream_messages`): nothing of the
caller's request or the vendor's answer is translated.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from inference.vendors import errors, http
from inference.vendors.base import (
    JSON,
    UnservedEndpoints,
    VendorTarget,
    assistant_message,
    portable_tool_ids,
    tool_call,
)
from inference.vendors.sse import events

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _image_block(url: str) -> JSON:
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header[5:].split(";")[0] or "image/png"
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any) -> list[JSON]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[JSON] = []
    for part in content:
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            blocks.append(_image_block(image["url"] if isinstance(image, dict) else image))
    return blocks


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def _tool_choice(choice: Any, parallel: bool | None) -> JSON | None:
    if choice is None and parallel is None:
        return None
    out: JSON
    if choice in (None, "auto"):
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    else:
        out = {"type": "tool", "name": choice["function"]["name"]}
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def to_anthropic(payload: JSON, *, model: str, stream: bool) -> JSON:
    """An OpenAI chat request as an Anthropic Messages request."""
    system: list[str] = []
    messages: list[JSON] = []

    def append(role: str, blocks: list[JSON]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in portable_tool_ids(payload["messages"]):
        role = message["role"]
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
        elif role == "user":
            append("user", _content_blocks(message.get("content")))
        elif role == "assistant":
            blocks = _content_blocks(message.get("content"))
            for call in message.get("tool_calls") or []:
                arguments = call["function"].get("arguments") or "{}"
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": json.loads(arguments),
                    }
                )
            append("assistant", blocks)
        elif role == "tool":
            append(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message["tool_call_id"],
                        "content": _text_of(message.get("content")),
                    }
                ],
            )
    body: JSON = {
        "model": model,
        "messages": messages,
        "max_tokens": payload.get("max_completion_tokens")
        or payload.get("max_tokens")
        or DEFAULT_MAX_TOKENS,
    }
    if system:
        body["system"] = "\n\n".join(system)
    if stream:
        body["stream"] = True
    if payload.get("temperature") is not None:
        body["temperature"] = min(float(payload["temperature"]), 1.0)
    for ours, theirs in (("top_p", "top_p"), ("top_k", "top_k")):
        if payload.get(ours) is not None:
            body[theirs] = payload[ours]
    stop = payload.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if payload.get("tools"):
        body["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"},
            }
            for t in payload["tools"]
        ]
        choice = _tool_choice(payload.get("tool_choice"), payload.get("parallel_tool_calls"))
        if choice is not None:
            body["tool_choice"] = choice
    if payload.get("user"):
        body["metadata"] = {"user_id": str(payload["user"])[:256]}
    return body


def _usage(usage: JSON) -> JSON:
    """Anthropic's usage in OpenAI's semantics (``inference.usage.chat_usage_report``):
    Anthropic's ``input_tokens`` excludes the cache reads (``cache_read_input_tokens``) and
    writes (``cache_creation_input_tokens``), OpenAI's ``prompt_tokens`` counts them; the
    writes' lifetimes (``cache_creation.ephemeral_5m_input_tokens`` /
    ``ephemeral_1h_input_tokens``; none given: five minutes) go in ``cache_write_tokens`` and
    its ``cache_write_1h_tokens`` part. Anthropic counts thinking in ``output_tokens`` and
    reports no part of it apart."""
    cached = int(usage.get("cache_read_input_tokens") or 0)
    lifetimes = usage.get("cache_creation") or {}
    hour = int(lifetimes.get("ephemeral_1h_input_tokens") or 0)
    five = int(lifetimes.get("ephemeral_5m_input_tokens") or 0)
    created = int(usage.get("cache_creation_input_tokens") or five + hour)
    prompt = int(usage.get("input_tokens") or 0) + cached + created
    completion = int(usage.get("output_tokens") or 0)
    details: JSON = {"cached_tokens": cached}
    if created:
        details["cache_write_tokens"] = created
    if hour:
        details["cache_write_1h_tokens"] = hour
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
    }


def from_anthropic(body: JSON, *, model: str) -> JSON:
    """An Anthropic Messages response as an OpenAI ``chat.completion``."""
    text: list[str] = []
    tool_calls: list[JSON] = []
    for block in body.get("content", []):
        if block.get("type") == "text":
            text.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            tool_calls.append(tool_call(block["id"], block["name"], block["input"]))
    message = assistant_message(text, tool_calls)
    return {
        "id": body.get("id", ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _STOP_REASONS.get(body.get("stop_reason") or "", "stop"),
                "logprobs": None,
            }
        ],
        "usage": _usage(body.get("usage") or {}),
    }


class ChunkTranslator:
    """Turns Anthropic stream events into OpenAI ``chat.completion.chunk`` dicts."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = ""
        self.created = int(time.time())
        self.usage: JSON = {}
        self.tool_index: dict[int, int] = {}

    def _chunk(self, delta: JSON, finish: str | None = None) -> JSON:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def feed(self, event: str, data: JSON) -> list[JSON]:
        """The OpenAI chunks for one Anthropic event (possibly none)."""
        kind = data.get("type", event)
        if kind == "message_start":
            message = data.get("message", {})
            self.id = message.get("id", "")
            self.usage.update(message.get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = data.get("content_block", {})
            if block.get("type") == "tool_use":
                index = len(self.tool_index)
                self.tool_index[data.get("index", 0)] = index
                call = {
                    "index": index,
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": ""},
                }
                return [self._chunk({"tool_calls": [call]})]
            return []
        if kind == "content_block_delta":
            delta = data.get("delta", {})
            if delta.get("type") == "text_delta":
                return [self._chunk({"content": delta.get("text", "")})]
            if delta.get("type") == "input_json_delta":
                index = self.tool_index.get(data.get("index", 0), 0)
                call = {"index": index, "function": {"arguments": delta.get("partial_json", "")}}
                return [self._chunk({"tool_calls": [call]})]
            return []
        if kind == "message_delta":
            self.usage.update(data.get("usage") or {})
            reason = (data.get("delta") or {}).get("stop_reason") or ""
            return [self._chunk({}, _STOP_REASONS.get(reason, "stop"))]
        if kind == "message_stop":
            usage_chunk = self._chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _usage(self.usage)
            return [usage_chunk]
        if kind == "error":
            message = (data.get("error") or {}).get("message", "stream error")
            raise errors.VendorServerError(f"anthropic stream error: {message}")
        return []


class AnthropicAdapter(UnservedEndpoints):
    """Adapter for Anthropic's native Messages API (chat only)."""

    def _headers(self, target: VendorTarget) -> dict[str, str]:
        return {"x-api-key": target.api_key or "", "anthropic-version": API_VERSION}

    def _check(self, payload: JSON, target: VendorTarget) -> None:
        if (payload.get("n") or 1) > 1:
            raise errors.VendorRejected(
                "Anthropic models return one choice per request (n must be 1)",
                status=400,
                vendor=target.vendor,
            )

    def _raise(self, target: VendorTarget, status: int, text: str) -> None:
        try:
            message, code, param = errors.error_fields(json.loads(text))
        except ValueError:
            message, code, param = "", None, None
        raise errors.from_status(
            status,
            f"{target.vendor} returned {status}: {message}"[:500],
            vendor=target.vendor,
            code=code,
            param=param,
        )

    async def chat(self, target: VendorTarget, payload: JSON) -> JSON:
        self._check(payload, target)
        body = to_anthropic(payload, model=target.upstream_model, stream=False)
        response = await http.request(
            target, "POST", "messages", auth=self._headers(target), json_body=body
        )
        if response.status >= 400:
            self._raise(target, response.status, response.text)
        try:
            return from_anthropic(response.json(), model=target.upstream_model)
        except (ValueError, KeyError) as exc:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered an unreadable message", vendor=target.vendor
            ) from exc

    async def stream_chat(self, target: VendorTarget, payload: JSON) -> AsyncGenerator[JSON, None]:
        self._check(payload, target)
        body = to_anthropic(payload, model=target.upstream_model, stream=True)
        async with http.stream(
            target, "POST", "messages", auth=self._headers(target), json_body=body
        ) as response:
            if response.status >= 400:
                self._raise(target, response.status, (await response.read()).text)
            translator = ChunkTranslator(target.upstream_model)
            async for event, data in events(response.lines()):
                try:
                    parsed = json.loads(data)
                except ValueError:
                    raise errors.malformed_event(target.vendor) from None
                for chunk in translator.feed(event, parsed):
                    yield chunk
                if parsed.get("type") == "message_stop":
                    return
            raise errors.VendorUnavailable(
                f"{target.vendor} ended the stream before message_stop", vendor=target.vendor
            )

    # --- pass-through: Anthropic Messages requests as the caller sent them ------------------
    def _native_headers(self, target: VendorTarget, headers: Mapping[str, str]) -> dict[str, str]:
        """The key, the caller's ``anthropic-version`` (else ours) and ``anthropic-beta``."""
        out = {
            "x-api-key": target.api_key or "",
            "anthropic-version": headers.get("anthropic-version") or API_VERSION,
        }
        if headers.get("anthropic-beta"):
            out["anthropic-beta"] = headers["anthropic-beta"]
        return out

    async def messages(self, target: VendorTarget, body: JSON, headers: Mapping[str, str]) -> JSON:
        """A Messages request ``body`` sent as it is (its model the upstream one); the vendor's
        ``message`` as it answered it — thinking blocks, their signatures and any block type
        untouched."""
        response = await http.request(
            target,
            "POST",
            "messages",
            auth=self._native_headers(target, headers),
            json_body={**body, "model": target.upstream_model},
        )
        if response.status >= 400:
            self._raise(target, response.status, response.text)
        try:
            message = response.json()
        except ValueError:
            message = None
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            raise errors.VendorProtocolError(
                f"{target.vendor} answered an unreadable message", vendor=target.vendor
            )
        return message

    async def stream_messages(
        self, target: VendorTarget, body: JSON, headers: Mapping[str, str]
    ) -> AsyncGenerator[tuple[str, JSON], None]:
        """A streamed Messages request sent as it is: each event's ``data`` as the vendor sent
        it, with its parsed object, through ``message_stop``; an ``error`` event raises."""
        async with http.stream(
            target,
            "POST",
            "messages",
            auth=self._native_headers(target, headers),
            json_body={**body, "model": target.upstream_model, "stream": True},
        ) as response:
            if response.status >= 400:
                self._raise(target, response.status, (await response.read()).text)
            async for _event, data in events(response.lines()):
                try:
                    parsed = json.loads(data)
                except ValueError:
                    raise errors.malformed_event(target.vendor) from None
                if not isinstance(parsed, dict):
                    raise errors.malformed_event(target.vendor)
                if parsed.get("type") == "error":
                    message = (parsed.get("error") or {}).get("message", "stream error")
                    raise errors.VendorServerError(f"anthropic stream error: {message}")
                yield data, parsed
                if parsed.get("type") == "message_stop":
                    return
            raise errors.VendorUnavailable(
                f"{target.vendor} ended the stream before message_stop", vendor=target.vendor
            )
