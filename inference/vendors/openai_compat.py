"""The OpenAI-compatible wire format: OpenAI, DeepSeek, DashScope, vLLM, SGLang, our gpu-backend."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from inference.vendors import errors
from inference.vendors.base import JSON, BinaryResult, VendorTarget
from inference.vendors.http import client_for, timeout_for
from inference.vendors.sse import events


def _headers(target: VendorTarget) -> dict[str, str]:
    return {"authorization": f"Bearer {target.api_key}"} if target.api_key else {}


def _error(response: httpx.Response) -> tuple[str, str | None, str | None]:
    """The vendor's own error message, code and param, if its body has them (never our request
    or key); see :func:`errors.error_fields`."""
    try:
        message, code, param = errors.error_fields(response.json())
    except ValueError:
        message, code, param = "", None, None
    return str(message or response.reason_phrase or "error")[:500], code, param


def _raise_for_status(target: VendorTarget, response: httpx.Response) -> None:
    if response.status_code >= 400:
        message, code, param = _error(response)
        raise errors.from_status(
            response.status_code,
            f"{target.vendor} returned {response.status_code}: {message}",
            vendor=target.vendor,
            code=code,
            param=param,
            retry_after=response.headers.get("retry-after"),
        )


def chat_payload(target: VendorTarget, payload: JSON, *, stream: bool) -> JSON:
    """The request body for the vendor: its model name; usage always asked for on streams."""
    body = {**payload, "model": target.upstream_model, "stream": stream}
    if stream:
        body["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    else:
        body.pop("stream_options", None)
    return body


def _json(target: VendorTarget, response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise errors.VendorProtocolError(
            f"{target.vendor} answered with a body that is not JSON", vendor=target.vendor
        ) from None


class OpenAICompatibleAdapter:
    """Adapter for any server that speaks OpenAI's HTTP API."""

    async def _post_json(self, target: VendorTarget, path: str, body: JSON) -> Any:
        client = client_for(target)
        with errors.translate(target.vendor):
            response = await client.post(
                path, json=body, headers=_headers(target), timeout=timeout_for(target)
            )
        _raise_for_status(target, response)
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
        client = client_for(target)
        request = client.build_request(
            "POST",
            "chat/completions",
            json=chat_payload(target, payload, stream=True),
            headers=_headers(target),
            timeout=timeout_for(target),
        )
        with errors.translate(target.vendor):
            response = await client.send(request, stream=True)
        try:
            if response.status_code >= 400:
                with errors.translate(target.vendor):
                    await response.aread()
                _raise_for_status(target, response)
            with errors.translate(target.vendor):
                async for _event, data in events(response.aiter_lines()):
                    if data.strip() == "[DONE]":
                        return
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        raise errors.VendorProtocolError(
                            f"{target.vendor} sent a malformed stream event", vendor=target.vendor
                        ) from None
                    if isinstance(chunk, dict) and "error" in chunk:
                        message = str(chunk["error"].get("message", "stream error"))[:500]
                        raise errors.VendorServerError(
                            f"{target.vendor}: {message}", vendor=target.vendor
                        )
                    yield chunk
            raise errors.VendorUnavailable(
                f"{target.vendor} ended the stream without [DONE]", vendor=target.vendor
            )
        finally:
            await response.aclose()

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

    async def speech(self, target: VendorTarget, payload: JSON) -> BinaryResult:
        client = client_for(target)
        body = {**payload, "model": target.upstream_model}
        with errors.translate(target.vendor):
            response = await client.post(
                "audio/speech", json=body, headers=_headers(target), timeout=timeout_for(target)
            )
        _raise_for_status(target, response)
        return BinaryResult(
            response.content, response.headers.get("content-type", "application/octet-stream")
        )

    async def speech_stream(
        self, target: VendorTarget, payload: JSON
    ) -> tuple[str, AsyncGenerator[bytes, None]]:
        client = client_for(target)
        request = client.build_request(
            "POST",
            "audio/speech",
            json={**payload, "model": target.upstream_model},
            headers=_headers(target),
            timeout=timeout_for(target),
        )
        with errors.translate(target.vendor):
            response = await client.send(request, stream=True)
        if response.status_code >= 400:
            try:
                with errors.translate(target.vendor):
                    await response.aread()
                _raise_for_status(target, response)
            finally:
                await response.aclose()

        async def chunks() -> AsyncGenerator[bytes, None]:
            try:
                with errors.translate(target.vendor):
                    async for chunk in response.aiter_bytes():
                        yield chunk
            finally:
                await response.aclose()

        return response.headers.get("content-type", "application/octet-stream"), chunks()

    async def transcribe(
        self, target: VendorTarget, fields: dict[str, str], file: tuple[str, bytes, str]
    ) -> JSON | str:
        client = client_for(target)
        data = {**fields, "model": target.upstream_model}
        with errors.translate(target.vendor):
            response = await client.post(
                "audio/transcriptions",
                data=data,
                files={"file": file},
                headers=_headers(target),
                timeout=timeout_for(target),
            )
        _raise_for_status(target, response)
        if response.headers.get("content-type", "").startswith("application/json"):
            return _json(target, response)  # type: ignore[no-any-return]
        return response.text

    async def list_models(self, target: VendorTarget) -> list[str]:
        client = client_for(target)
        with errors.translate(target.vendor):
            response = await client.get(
                "models", headers=_headers(target), timeout=timeout_for(target)
            )
        _raise_for_status(target, response)
        body = _json(target, response)
        return [m["id"] for m in body.get("data", []) if isinstance(m, dict) and "id" in m]
