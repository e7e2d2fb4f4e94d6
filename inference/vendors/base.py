"""The adapter Protocol and the values that cross it.

Payloads in and out are OpenAI-shaped dicts: an adapter for another wire format translates
both ways with pure functions; the HTTP call is a thin shell around them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from inference.vendors.errors import VendorRejected

JSON = dict[str, Any]
# A multipart form's plain fields: a list is a repeated field (``timestamp_granularities[]``).
FormFields = Mapping[str, str | list[str]]
# An uploaded file: its name, bytes and content type.
FileUpload = tuple[str, bytes, str]
# An audio answer: its content type, and its bytes as the vendor sends them.
AudioStream = tuple[str, AsyncGenerator[bytes, None]]


@dataclass(frozen=True, slots=True)
class VendorTarget:
    """Where and how to call one offering.

    ``api_key``: the secret as the vendor's credentials setting holds it (its shape is the
    adapter's: a bearer key, or AWS credentials for Bedrock). ``region``: the vendor's region
    (Bedrock signs for it). ``api_version``: the wire-format version to send (empty: the
    adapter's default).
    """

    vendor: str
    base_url: str
    upstream_model: str
    api_key: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    region: str = ""
    api_version: str = ""


class Adapter(Protocol):
    """What the gateway can ask a vendor. Every method raises ``VendorError`` on failure."""

    async def chat(self, target: VendorTarget, payload: JSON) -> JSON:
        """A ``chat.completion`` for an OpenAI chat request (``stream`` false)."""
        ...

    def stream_chat(self, target: VendorTarget, payload: JSON) -> AsyncGenerator[JSON, None]:
        """``chat.completion.chunk`` dicts as the vendor produces them (usage chunk included
        when the vendor sends one). Closing the iterator cancels the upstream request."""
        ...

    async def embed(self, target: VendorTarget, payload: JSON) -> JSON: ...

    async def images(self, target: VendorTarget, payload: JSON) -> JSON: ...

    async def moderate(self, target: VendorTarget, payload: JSON) -> JSON: ...

    async def speech_stream(self, target: VendorTarget, payload: JSON) -> AudioStream:
        """The audio's content type and its bytes as the vendor sends them. Errors before the
        first byte raise; closing the generator cancels the upstream request."""
        ...

    async def transcribe(
        self, target: VendorTarget, fields: FormFields, file: FileUpload
    ) -> JSON | str:
        """A transcription of ``file``, with the form ``fields`` sent beside it."""
        ...


# What every vendor takes as a tool-call id: OpenAI caps ids at 40 characters; Anthropic and
# Bedrock allow letters, digits, ``_`` and ``-`` only.
_PORTABLE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")


def portable_tool_id(call_id: str) -> str:
    """``call_id`` when every vendor accepts it as it is, else ``call_`` and 32 hex digits of
    its SHA-256: the same id always maps to the same one, so a tool call and its result still
    match. (Ids another vendor minted — Gemini's carry a thought signature — can be long.)"""
    if _PORTABLE_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:32]


def portable_tool_ids(messages: list[JSON]) -> list[JSON]:
    """``messages`` with every tool-call id and ``tool_call_id`` made portable
    (:func:`portable_tool_id`); the same list when none needs it."""
    if all(
        _PORTABLE_ID.fullmatch(str(call.get("id") or "x"))
        for m in messages
        for call in (m.get("tool_calls") or ())
        if isinstance(call, dict)
    ) and all(
        _PORTABLE_ID.fullmatch(str(m.get("tool_call_id") or "x"))
        for m in messages
        if isinstance(m, dict)
    ):
        return messages
    out: list[JSON] = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [
                {**c, "id": portable_tool_id(str(c.get("id") or ""))} if isinstance(c, dict) else c
                for c in message["tool_calls"]
            ]
            message = {**message, "tool_calls": calls}
        if message.get("tool_call_id") is not None:
            message = {**message, "tool_call_id": portable_tool_id(str(message["tool_call_id"]))}
        out.append(message)
    return out


class UnservedEndpoints:
    """What an adapter answers for the endpoints its vendor does not serve: a
    ``VendorRejected`` naming the vendor (a subclass overrides what its vendor has)."""

    def _unsupported(self, target: VendorTarget, what: str) -> NoReturn:
        raise VendorRejected(f"{target.vendor} does not serve {what}", vendor=target.vendor)

    async def embed(self, target: VendorTarget, payload: JSON) -> JSON:
        self._unsupported(target, "embeddings")

    async def images(self, target: VendorTarget, payload: JSON) -> JSON:
        self._unsupported(target, "images")

    async def moderate(self, target: VendorTarget, payload: JSON) -> JSON:
        self._unsupported(target, "moderations")

    async def speech_stream(self, target: VendorTarget, payload: JSON) -> AudioStream:
        self._unsupported(target, "speech")

    async def transcribe(
        self, target: VendorTarget, fields: FormFields, file: FileUpload
    ) -> JSON | str:
        self._unsupported(target, "transcriptions")


def tool_call(call_id: str, name: str, arguments: Any) -> JSON:
    """An OpenAI ``function`` tool call of a whole answer (``arguments`` as JSON text)."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def assistant_message(text: list[str], tool_calls: list[JSON]) -> JSON:
    """The ``message`` of a ``chat.completion`` choice: the text parts joined (``None`` when
    there are none) and the tool calls, when there are any."""
    message: JSON = {"role": "assistant", "content": "".join(text) if text else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message
