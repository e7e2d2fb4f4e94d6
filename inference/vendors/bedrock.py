"""AWS Bedrock Runtime: the Converse API, translated to and from OpenAI chat with pure functions.

Wire format from botocore's service model (``botocore/data/bedrock-runtime/2023-09-30``):
``POST /model/{modelId}/converse`` and ``…/converse-stream`` (an
``application/vnd.amazon.eventstream`` answer, decoded by botocore's ``EventStreamBuffer``);
embeddings are Titan Text Embeddings V2 through ``POST /model/{modelId}/invoke``, one call per
input. Model ids (foundation models, inference profiles, ARNs) are percent-encoded as botocore
encodes a URI label (``:`` → ``%3A``, ``/`` → ``%2F``) and sent byte for byte, since SigV4
signs the path. Requests are signed by botocore (or carry a Bedrock API key as a bearer token:
the credentials' format is :func:`catalog.vendor_wire.bedrock_credentials`); the HTTP itself goes
through :mod:`inference.vendors.http`.

Images: data URLs become ``image.source.bytes``. Converse takes no image URL (only bytes or an
S3 location), so an ``http(s)`` image is fetched by the gateway first
(:mod:`inference.vendors.fetch`: public addresses only, size and type checked).
``tool_choice: "none"`` has no Converse equivalent: the tools are left out, unless the
conversation already holds tool calls (Converse then requires them), where the model chooses
(``auto``). JSON output is
Converse's ``outputConfig.textFormat`` (``json_schema``; ``json_object`` asks for any object).
``top_k`` goes to Anthropic models as ``additionalModelRequestFields.top_k`` and is dropped for
the others (Converse has no field for it). Reasoning blocks are not relayed.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator
from typing import Any, NoReturn

from botocore.eventstream import EventStreamBuffer, EventStreamMessage, ParserError
from botocore.utils import percent_encode

from catalog.vendor_wire import bedrock_auth_headers, bedrock_region
from inference.vendors import errors, fetch, http
from inference.vendors.base import (
    JSON,
    UnservedEndpoints,
    VendorTarget,
    assistant_message,
    portable_tool_ids,
    tool_call,
)
from infra import jsonio

DEFAULT_MAX_TOKENS = 4096
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
_IMAGE_FORMATS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg", "gif": "gif", "webp": "webp"}
# Bedrock's exception names (HTTP ``x-amzn-errortype``, a stream's ``:exception-type`` with its
# first letter lowered) → our error class. Anything else falls back to its HTTP status.
_RATE_LIMITED = {"ThrottlingException": "rate limited", "ServiceQuotaExceededException": "quota"}
_MISCONFIGURED = {
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "ResourceNotFoundException",
}
_SERVER = {
    "ModelTimeoutException",
    "InternalServerException",
    "ServiceUnavailableException",
    "ModelErrorException",
    "ModelStreamErrorException",
}


# --- errors ----------------------------------------------------------------------------------
def bedrock_error(
    name: str, status: int | None, message: str, *, vendor: str, retry_after: str | None = None
) -> errors.VendorError:
    """Our error for Bedrock exception ``name`` (``"ThrottlingException"``, or a stream's
    ``"throttlingException"`` with ``status`` ``None``) and the vendor's ``message``."""
    name = name[:1].upper() + name[1:]
    where = f"returned {status}" if status is not None else "stream event"
    text = f"{vendor} {where} {name}: {message}"[:500]
    if name in _RATE_LIMITED:
        # Both are 429 to our callers; the message says which (rate limit or quota).
        text = f"{vendor} {_RATE_LIMITED[name]} ({name}): {message}"[:500]
        return errors.VendorRateLimited(text, status=429, vendor=vendor)
    if name == "ModelNotReadyException":
        return errors.VendorLoading(text, status=status, vendor=vendor)
    if name in _MISCONFIGURED:
        return errors.VendorMisconfigured(text, status=status, vendor=vendor)
    if name in _SERVER:
        return errors.VendorServerError(text, status=status, vendor=vendor)
    if name == "ValidationException":
        _message, code, param = errors.error_fields({"message": message})
        return errors.VendorRejected(text, status=400, vendor=vendor, code=code, param=param)
    if status is None:  # an exception event Bedrock's model does not list: its fault
        return errors.VendorServerError(text, vendor=vendor)
    return errors.from_status(status, text, vendor=vendor, retry_after=retry_after)


def _raise_for(target: VendorTarget, response: http.VendorResponse) -> NoReturn:
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    message = str(body.get("message") or body.get("Message") or response.reason or "error")
    # ``x-amzn-errortype`` may carry a namespace after a colon; the body's ``__type`` a prefix.
    name = response.headers.get("x-amzn-errortype") or str(body.get("__type") or "")
    name = name.split(":", 1)[0].rsplit("#", 1)[-1]
    raise bedrock_error(
        name,
        response.status,
        message,
        vendor=target.vendor,
        retry_after=response.headers.get("retry-after"),
    )


# --- OpenAI → Converse -------------------------------------------------------------------------
def _reject(message: str, *, code: str | None = None, param: str | None = None) -> NoReturn:
    raise errors.VendorRejected(message, status=400, code=code, param=param)


def _image_block(url: str) -> JSON:
    """An image block of a ``data:`` URL (http(s) URLs are fetched into data URLs before:
    :func:`inference.vendors.fetch.inline_images`)."""
    if not url.startswith("data:"):
        _reject(
            "Bedrock takes images as bytes: send a data URL or an http(s) URL",
            code="invalid_image_url",
            param="messages",
        )
    header, _, data = url.partition(",")
    media_type = header[5:].split(";")[0].lower()
    image_format = _IMAGE_FORMATS.get(media_type.removeprefix("image/"))
    if image_format is None or ";base64" not in header:
        _reject(
            "Bedrock takes base64 PNG, JPEG, GIF or WebP images",
            code="invalid_image_url",
            param="messages",
        )
    # A blob travels base64-encoded in Converse's JSON: the data URL's payload as it is.
    return {"image": {"format": image_format, "source": {"bytes": data}}}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def _content_blocks(content: Any) -> list[JSON]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    blocks: list[JSON] = []
    for part in content or []:
        if part.get("type") == "text" and part.get("text"):
            blocks.append({"text": part["text"]})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            blocks.append(_image_block(image["url"] if isinstance(image, dict) else image))
    return blocks


def _tool_use(call: JSON) -> JSON:
    arguments = call["function"].get("arguments") or "{}"
    try:
        parsed = json.loads(arguments)
    except ValueError:
        _reject("a tool call's arguments are not JSON", param="messages")
    return {"toolUse": {"toolUseId": call["id"], "name": call["function"]["name"], "input": parsed}}


def _messages(payload: JSON) -> tuple[list[JSON], list[JSON]]:
    """``(system, messages)`` of a Converse request; consecutive turns of one role merge (tool
    results follow their call as one user turn, as Converse requires)."""
    system: list[JSON] = []
    messages: list[JSON] = []

    def append(role: str, blocks: list[JSON]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in portable_tool_ids(payload["messages"]):
        role = message["role"]
        if role in ("system", "developer"):
            text = _text_of(message.get("content"))
            if text:
                system.append({"text": text})
        elif role == "user":
            append("user", _content_blocks(message.get("content")))
        elif role == "assistant":
            blocks = _content_blocks(message.get("content"))
            blocks += [_tool_use(call) for call in message.get("tool_calls") or []]
            append("assistant", blocks)
        elif role == "tool":
            text = _text_of(message.get("content"))
            result = {"toolUseId": message["tool_call_id"], "content": [{"text": text or " "}]}
            append("user", [{"toolResult": result}])
    return system, messages


def _inference_config(payload: JSON) -> JSON:
    config: JSON = {
        "maxTokens": int(
            payload.get("max_completion_tokens") or payload.get("max_tokens") or DEFAULT_MAX_TOKENS
        )
    }
    if payload.get("temperature") is not None:
        config["temperature"] = float(payload["temperature"])
    if payload.get("top_p") is not None:
        config["topP"] = float(payload["top_p"])
    stop = payload.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    return config


def _tool_config(payload: JSON, messages: list[JSON]) -> JSON | None:
    tools = payload.get("tools") or []
    choice = payload.get("tool_choice")
    has_tool_blocks = any(
        "toolUse" in block or "toolResult" in block for m in messages for block in m["content"]
    )
    if not tools or (choice == "none" and not has_tool_blocks):
        return None
    specs = []
    for tool in tools:
        function = tool["function"]
        spec: JSON = {
            "name": function["name"],
            "inputSchema": {"json": function.get("parameters") or {"type": "object"}},
        }
        if function.get("description"):
            spec["description"] = function["description"]
        specs.append({"toolSpec": spec})
    config: JSON = {"tools": specs}
    if choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict):
        config["toolChoice"] = {"tool": {"name": choice["function"]["name"]}}
    elif choice == "auto":
        config["toolChoice"] = {"auto": {}}
    return config


def _output_config(payload: JSON) -> JSON | None:
    fmt = payload.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        schema: JSON = {"schema": json.dumps(spec.get("schema") or {"type": "object"})}
        if spec.get("name"):
            schema["name"] = spec["name"]
        if spec.get("description"):
            schema["description"] = spec["description"]
    elif fmt.get("type") == "json_object":
        schema = {"schema": json.dumps({"type": "object"}), "name": "json_object"}
    else:
        return None
    return {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": schema}}}


def is_anthropic(model_id: str) -> bool:
    """Whether a model id, inference profile or ARN names an Anthropic model."""
    return "anthropic." in model_id


def to_converse(payload: JSON, *, model: str) -> JSON:
    """An OpenAI chat request as a Converse (or ConverseStream) request body for ``model``
    (the model id goes in the path, not the body)."""
    if (payload.get("n") or 1) > 1:
        _reject("Bedrock returns one choice per request (n must be 1)", param="n")
    system, messages = _messages(payload)
    body: JSON = {"messages": messages, "inferenceConfig": _inference_config(payload)}
    if system:
        body["system"] = system
    tool_config = _tool_config(payload, messages)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    output_config = _output_config(payload)
    if output_config is not None:
        body["outputConfig"] = output_config
    if payload.get("top_k") is not None and is_anthropic(model):
        body["additionalModelRequestFields"] = {"top_k": int(payload["top_k"])}
    return body


# --- Converse → OpenAI -------------------------------------------------------------------------
def usage_from(usage: JSON) -> JSON:
    """Converse's ``TokenUsage`` as OpenAI usage (``inference.usage.chat_usage_report``): the
    prompt counts cache reads and writes (``inputTokens`` excludes both); cache reads are the
    cached tokens, writes the ``cache_write_tokens``, of which ``cacheDetails`` entries with
    ``ttl`` ``1h`` are the ``cache_write_1h_tokens`` (the rest: five minutes)."""
    cached = int(usage.get("cacheReadInputTokens") or 0)
    written = int(usage.get("cacheWriteInputTokens") or 0)
    details = usage.get("cacheDetails")
    hour = sum(
        int(d.get("inputTokens") or 0)
        for d in (details if isinstance(details, list) else ())
        if isinstance(d, dict) and d.get("ttl") == "1h"
    )
    prompt = int(usage.get("inputTokens") or 0) + cached + written
    completion = int(usage.get("outputTokens") or 0)
    prompt_details: JSON = {"cached_tokens": cached}
    if written:
        prompt_details["cache_write_tokens"] = written
    if hour:
        prompt_details["cache_write_1h_tokens"] = hour
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": prompt_details,
    }


def finish_reason(stop_reason: str | None) -> str:
    """OpenAI's ``finish_reason`` for a Converse ``stopReason``."""
    return _STOP_REASONS.get(stop_reason or "", "stop")


def from_converse(body: JSON, *, model: str) -> JSON:
    """A Converse response as an OpenAI ``chat.completion``."""
    text: list[str] = []
    tool_calls: list[JSON] = []
    for block in ((body.get("output") or {}).get("message") or {}).get("content") or []:
        if "text" in block:
            text.append(str(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            tool_calls.append(tool_call(use["toolUseId"], use["name"], use["input"]))
    message = assistant_message(text, tool_calls)
    return {
        "id": f"chatcmpl-bedrock-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(body.get("stopReason")),
                "logprobs": None,
            }
        ],
        "usage": usage_from(body.get("usage") or {}),
    }


class ChunkTranslator:
    """Turns ConverseStream events into OpenAI ``chat.completion.chunk`` dicts."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"chatcmpl-bedrock-{time.time_ns()}"
        self.created = int(time.time())
        self.tool_index: dict[int, int] = {}
        self.done = False

    def _chunk(self, delta: JSON, finish: str | None = None) -> JSON:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def feed(self, event: str, data: JSON) -> list[JSON]:
        """The OpenAI chunks for one ConverseStream event (possibly none); ``metadata`` (the
        last event, with usage) sets :attr:`done`."""
        if event == "messageStart":
            return [self._chunk({"role": "assistant", "content": ""})]
        if event == "contentBlockStart":
            use = (data.get("start") or {}).get("toolUse")
            if not use:
                return []
            index = self.tool_index.setdefault(
                int(data.get("contentBlockIndex", 0)), len(self.tool_index)
            )
            call = {
                "index": index,
                "id": use["toolUseId"],
                "type": "function",
                "function": {"name": use["name"], "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        if event == "contentBlockDelta":
            delta = data.get("delta") or {}
            if "text" in delta:
                return [self._chunk({"content": str(delta["text"])})]
            if "toolUse" in delta:
                index = self.tool_index.get(int(data.get("contentBlockIndex", 0)), 0)
                arguments = str(delta["toolUse"].get("input", ""))
                return [
                    self._chunk(
                        {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}
                    )
                ]
            return []
        if event == "messageStop":
            return [self._chunk({}, finish_reason(data.get("stopReason")))]
        if event == "metadata":
            self.done = True
            usage_chunk = self._chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = usage_from(data.get("usage") or {})
            return [usage_chunk]
        return []


def event_of(message: EventStreamMessage, *, vendor: str) -> tuple[str, JSON]:
    """``(event type, payload)`` of one event-stream message; an exception or error message
    raises its :class:`VendorError`."""
    headers = message.headers
    kind = headers.get(":message-type")
    try:
        payload = jsonio.loads(message.payload) if message.payload else {}
    except ValueError:
        raise errors.malformed_event(vendor) from None
    payload = payload if isinstance(payload, dict) else {}
    if kind == "exception":
        name = str(headers.get(":exception-type") or "")
        text = str(payload.get("message") or payload.get("Message") or "stream error")
        raise bedrock_error(name, None, text, vendor=vendor)
    if kind == "error":
        name = str(headers.get(":error-code") or "")
        text = str(headers.get(":error-message") or "stream error")
        raise bedrock_error(name, None, text, vendor=vendor)
    return str(headers.get(":event-type") or ""), payload


# --- the adapter -------------------------------------------------------------------------------
def model_path(model_id: str, operation: str) -> str:
    """``model/{modelId}/{operation}`` with the id percent-encoded as botocore encodes a URI
    label (only ``-._~`` left as they are)."""
    return f"model/{percent_encode(model_id)}/{operation}"


def _signed(target: VendorTarget, method: str, path: str, body: Any) -> dict[str, str]:
    """The headers of one request of ``body`` (JSON, or ``None``) to ``path`` at ``target``."""
    if not target.api_key:
        raise errors.VendorMisconfigured(
            f"{target.vendor}: no Bedrock credentials configured", vendor=target.vendor
        )
    url = target.base_url.rstrip("/") + "/" + path  # what inference.vendors.http sends
    data = jsonio.dumps(body) if body is not None else b""  # http encodes it the same way
    headers = {"content-type": "application/json"} if body is not None else {}
    try:
        region = bedrock_region(target.base_url, target.region)
        return bedrock_auth_headers(
            target.api_key, method=method, url=url, region=region, body=data, headers=headers
        )
    except ValueError as exc:
        raise errors.VendorMisconfigured(f"{target.vendor}: {exc}", vendor=target.vendor) from None


def _json(target: VendorTarget, response: http.VendorResponse) -> JSON:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise errors.VendorProtocolError(
            f"{target.vendor} answered with a body that is not a JSON object", vendor=target.vendor
        )
    return body


async def _converse_body(target: VendorTarget, payload: JSON) -> JSON:
    """:func:`to_converse` for ``target`` (its image URLs fetched), its refusals naming the
    vendor."""
    payload = await fetch.inline_images(payload, target)
    try:
        return to_converse(payload, model=target.upstream_model)
    except errors.VendorRejected as exc:
        exc.vendor = target.vendor
        raise


class BedrockAdapter(UnservedEndpoints):
    """Adapter for the Bedrock Runtime (Converse for chat, Titan V2 InvokeModel for
    embeddings)."""

    async def _post(self, target: VendorTarget, path: str, body: JSON) -> JSON:
        headers = _signed(target, "POST", path, body)
        response = await http.request(
            target, "POST", path, auth=headers, json_body=body, encoded=True
        )
        if response.status >= 400:
            _raise_for(target, response)
        return _json(target, response)

    async def chat(self, target: VendorTarget, payload: JSON) -> JSON:
        body = await _converse_body(target, payload)
        answer = await self._post(target, model_path(target.upstream_model, "converse"), body)
        try:
            return from_converse(answer, model=target.upstream_model)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered an unreadable Converse response", vendor=target.vendor
            ) from exc

    async def stream_chat(self, target: VendorTarget, payload: JSON) -> AsyncGenerator[JSON, None]:
        body = await _converse_body(target, payload)
        path = model_path(target.upstream_model, "converse-stream")
        headers = _signed(target, "POST", path, body)
        async with http.stream(
            target, "POST", path, auth=headers, json_body=body, encoded=True
        ) as response:
            if response.status >= 400:
                _raise_for(target, await response.read())
            translator = ChunkTranslator(target.upstream_model)
            buffer = EventStreamBuffer()
            async for data in response.chunks():
                buffer.add_data(data)
                try:
                    messages = list(buffer)
                except ParserError:
                    raise errors.VendorProtocolError(
                        f"{target.vendor} sent a malformed event-stream message",
                        vendor=target.vendor,
                    ) from None
                for message in messages:
                    event, parsed = event_of(message, vendor=target.vendor)
                    try:
                        chunks = translator.feed(event, parsed)
                    except (KeyError, TypeError, ValueError):
                        raise errors.malformed_event(target.vendor) from None
                    for chunk in chunks:
                        yield chunk
                    if translator.done:
                        return
            raise errors.VendorUnavailable(
                f"{target.vendor} ended the stream before its metadata event", vendor=target.vendor
            )

    async def embed(self, target: VendorTarget, payload: JSON) -> JSON:
        """Titan Text Embeddings V2: one InvokeModel per input (``dimensions`` passed on),
        usage summed from each ``inputTextTokenCount``."""
        raw = payload.get("input")
        items = [raw] if isinstance(raw, str) else list(raw or [])
        if not items or not all(isinstance(item, str) and item for item in items):
            raise errors.VendorRejected(
                "Bedrock embeds text only (non-empty strings, not token ids)",
                status=400,
                vendor=target.vendor,
                param="input",
            )
        path = model_path(target.upstream_model, "invoke")
        answers = []
        for item in items:  # one call at a time: a failure leaves nothing running behind it
            body: JSON = {"inputText": item}
            if payload.get("dimensions") is not None:
                body["dimensions"] = int(payload["dimensions"])
            answers.append(await self._post(target, path, body))
        try:
            data = [
                {"object": "embedding", "index": i, "embedding": list(answer["embedding"])}
                for i, answer in enumerate(answers)
            ]
            used = sum(int(answer.get("inputTextTokenCount") or 0) for answer in answers)
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered an unreadable embedding", vendor=target.vendor
            ) from exc
        return {
            "object": "list",
            "data": data,
            "model": target.upstream_model,
            "usage": {"prompt_tokens": used, "total_tokens": used},
        }
