"""The OpenAI-compatible wire format: OpenAI, DeepSeek, DashScope, vLLM, SGLang, our gpu-backend."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from inference.vendors import errors, http
from inference.vendors.base import (
    JSON,
    AudioStream,
    FileUpload,
    FormFields,
    VendorTarget,
    portable_tool_ids,
)
from inference.vendors.sse import events
from infra import jsonio


def _auth(target: VendorTarget) -> dict[str, str]:
    return {"authorization": f"Bearer {target.api_key}"} if target.api_key else {}


def _error(response: http.VendorResponse) -> tuple[str, str | None, str | None]:
    """The vendor's own error message, code and param, if its body has them (never our request
    or key); see :func:`errors.error_fields`."""
    try:
        message, code, param = errors.error_fields(response.json())
    except ValueError:
        message, code, param = "", None, None
    return str(message or response.reason or "error")[:500], code, param


def _raise_for_status(target: VendorTarget, response: http.VendorResponse) -> None:
    if response.status >= 400:
        message, code, param = _error(response)
        raise errors.from_status(
            response.status,
            f"{target.vendor} returned {response.status}: {message}",
            vendor=target.vendor,
            code=code,
            param=param,
            retry_after=response.headers.get("retry-after"),
        )


def chat_payload(target: VendorTarget, payload: JSON, *, stream: bool) -> JSON:
    """The request body for the vendor: its model name; usage always asked for on streams;
    tool-call ids every vendor accepts (:func:`~inference.vendors.base.portable_tool_ids`)."""
    body = {**payload, "model": target.upstream_model, "stream": stream}
    if "messages" in payload:
        body["messages"] = portable_tool_ids(payload["messages"])
    if stream:
        body["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    else:
        body.pop("stream_options", None)
    return body


def _json(target: VendorTarget, response: http.VendorResponse) -> Any:
    try:
        return response.json()
    except ValueError:
        raise errors.VendorProtocolError(
            f"{target.vendor} answered with a body that is not JSON", vendor=target.vendor
        ) from None


class OpenAICompatibleAdapter:
    """Adapter for any server that speaks OpenAI's HTTP API.

    A dialect of it (Azure OpenAI) overrides the hooks: :meth:`auth_headers` (how the key is
    sent), :meth:`path` (where an operation lives under the base URL) and
    :meth:`raise_for_status` (how an error answer becomes a ``VendorError``).
    """

    def auth_headers(self, target: VendorTarget) -> dict[str, str]:
        """The headers that carry ``target``'s key (a bearer token; none without a key)."""
        return _auth(target)

    def path(self, target: VendorTarget, operation: str) -> str:
        """The request path, relative to the base URL, of ``operation`` (``chat/completions``,
        ``embeddings`` …) for ``target``."""
        return operation

    def raise_for_status(self, target: VendorTarget, response: http.VendorResponse) -> None:
        """Raise the ``VendorError`` for an error status (4xx/5xx); return on success."""
        _raise_for_status(target, response)

    async def _post_json(self, target: VendorTarget, operation: str, body: JSON) -> Any:
        response = await http.request(
            target,
            "POST",
            self.path(target, operation),
            auth=self.auth_headers(target),
            json_body=body,
        )
        self.raise_for_status(target, response)
        return _json(target, response)

    async def chat(self, target: VendorTarget, payload: JSON) -> JSON:
        body = await self._post_json(
            target, "chat/completions", chat_payload(target, payload, stream=False)
        )
        if not isinstance(body, dict) or "choices" not in body:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered without choices", vendor=target.vendor
            )
        return body

    async def stream_chat(self, target: VendorTarget, payload: JSON) -> AsyncGenerator[JSON, None]:
        async with http.stream(
            target,
            "POST",
            self.path(target, "chat/completions"),
            auth=self.auth_headers(target),
            json_body=chat_payload(target, payload, stream=True),
        ) as response:
            if response.status >= 400:
                self.raise_for_status(target, await response.read())
            async for _event, data in events(response.lines()):
                if data.strip() == "[DONE]":
                    return
                try:
                    chunk = jsonio.loads(data)
                except ValueError:
                    raise errors.malformed_event(target.vendor) from None
                if isinstance(chunk, dict) and "error" in chunk:
                    message = str(chunk["error"].get("message", "stream error"))[:500]
                    raise errors.VendorServerError(
                        f"{target.vendor}: {message}", vendor=target.vendor
                    )
                yield chunk
            raise errors.VendorUnavailable(
                f"{target.vendor} ended the stream without [DONE]", vendor=target.vendor
            )

    async def embed(self, target: VendorTarget, payload: JSON) -> JSON:
        return await self._post_json(
            target, "embeddings", {**payload, "model": target.upstream_model}
        )

    async def images(self, target: VendorTarget, payload: JSON) -> JSON:
        return await self._post_json(
            target, "images/generations", {**payload, "model": target.upstream_model}
        )

    async def moderate(self, target: VendorTarget, payload: JSON) -> JSON:
        return await self._post_json(
            target, "moderations", {**payload, "model": target.upstream_model}
        )

    async def speech_stream(self, target: VendorTarget, payload: JSON) -> AudioStream:
        opened = http.stream(
            target,
            "POST",
            self.path(target, "audio/speech"),
            auth=self.auth_headers(target),
            json_body={**payload, "model": target.upstream_model},
        )
        response = await opened.__aenter__()
        if response.status >= 400:
            try:
                self.raise_for_status(target, await response.read())
            finally:
                await opened.__aexit__(None, None, None)

        async def chunks() -> AsyncGenerator[bytes, None]:
            try:
                async for chunk in response.chunks():
                    yield chunk
            finally:
                await opened.__aexit__(None, None, None)

        return response.headers.get("content-type", "application/octet-stream"), chunks()

    async def transcribe(
        self, target: VendorTarget, fields: FormFields, file: FileUpload
    ) -> JSON | str:
        form = aiohttp.FormData()
        for name, value in {**fields, "model": target.upstream_model}.items():
            # A list is a repeated field (timestamp_granularities[]).
            for item in value if isinstance(value, list) else [value]:
                form.add_field(name, item)
        filename, content, content_type = file
        form.add_field("file", content, filename=filename, content_type=content_type)
        response = await http.request(
            target,
            "POST",
            self.path(target, "audio/transcriptions"),
            auth=self.auth_headers(target),
            form=form,
        )
        self.raise_for_status(target, response)
        if response.content_type.startswith("application/json"):
            return _json(target, response)  # type: ignore[no-any-return]
        return response.text
