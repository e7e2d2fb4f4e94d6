"""The adapter Protocol and the values that cross it.

Payloads in and out are OpenAI-shaped dicts: an adapter for another wire format translates
both ways with pure functions; the HTTP call is a thin shell around them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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
