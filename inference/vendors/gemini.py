"""Google's Gemini API (``generativelanguage.googleapis.com/v1beta``), translated to and from
OpenAI chat and embeddings with pure functions.

Wire format as the official ``google-genai`` SDK builds and reads it (``models.py``'s
``_GenerateContentParameters_to_mldev`` / ``_GenerateContentConfig_to_mldev``, ``types.py``):
chat is ``POST models/{model}:generateContent``, a stream ``POST
models/{model}:streamGenerateContent?alt=sse`` (SSE ``data:`` events, each a whole
``GenerateContentResponse``, the stream simply ending after the last), embeddings ``POST
models/{model}:batchEmbedContents``; the key travels in ``x-goog-api-key``.

What does not map one to one, and what we do:

- **Tool-call ids.** Gemini's ``functionCall`` parts carry no id we can rely on, so each call
  gets a stable one (:func:`call_id`: a digest of its name, arguments and position, the same in
  a stream and a whole answer); a ``tool`` message is sent back as a ``functionResponse`` named
  after the call its ``tool_call_id`` refers to. A call's ``thoughtSignature`` (Gemini 3
  refuses a function-call history without it) rides in the id after :data:`SIGNATURE_MARK` and
  is restored on the way back.
- **Image URLs.** ``fileData`` takes Files-API and Cloud Storage URIs, not arbitrary web URLs;
  an ``http(s)`` image is fetched by the gateway (:mod:`inference.vendors.fetch`: public
  addresses only, size and type checked) and sent as ``inlineData`` like a data URL.
- **Safety.** A prompt Gemini blocks (``promptFeedback.blockReason``, no candidates) is a
  :class:`~inference.vendors.errors.VendorRejected` with code ``content_filter``; an answer cut
  for safety, recitation, a blocklist, prohibited content or SPII ends with ``finish_reason``
  ``content_filter``.
- **Usage.** ``promptTokenCount`` (cached content included) plus ``toolUsePromptTokenCount``
  is ``prompt_tokens``; ``candidatesTokenCount`` plus ``thoughtsTokenCount`` is
  ``completion_tokens``, the thoughts also ``reasoning_tokens``. Counts that are not
  non-negative integers leave the usage out (the gateway then bills its own count, flagged).
  ``batchEmbedContents`` reports no usage: the embeddings answer has none, and the gateway
  counts the input itself and flags the call ``usage_estimated``.
- Not sent (Gemini has no equivalent): ``logit_bias``, ``logprobs``/``top_logprobs``,
  ``parallel_tool_calls``, ``repetition_penalty``, ``user``. Images, audio and moderations are
  refused (Gemini's own endpoints for those are different products).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from inference.vendors import errors, fetch, http
from inference.vendors.base import (
    JSON,
    UnservedEndpoints,
    VendorTarget,
    tool_call,
)
from inference.vendors.sse import events
from infra import jsonio

API_KEY_HEADER = "x-goog-api-key"
# What separates a tool-call id from the thought signature it carries (see the docstring).
SIGNATURE_MARK = "__thought__"
# The thought signature Google's docs give for function calls that did not come from Gemini
# ("skip the validator"; ai.google.dev/gemini-api/docs/thought-signatures, FAQ).
FOREIGN_CALL_SIGNATURE = "skip_thought_signature_validator"
_CONTENT_FILTER = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
}
_TOOL_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
# How Gemini words a prompt over the model's input limit ("The input token count (N) exceeds
# the maximum number of tokens allowed (M).").
_OVERFLOW = re.compile(r"exceeds the maximum number of tokens|input token count", re.I)
_MISCONFIGURED = {"PERMISSION_DENIED", "UNAUTHENTICATED", "NOT_FOUND"}
# ErrorInfo reasons of a 400 that is about our key, not the request.
_KEY_REASONS = {"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED"}
_TYPE = "@type"


def model_path(model: str) -> str:
    """The resource name of an upstream model id (``models/…``; a ``tunedModels/…`` or
    ``models/…`` name is kept as it is)."""
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


def call_id(name: str, args: Any, position: int, signature: str | None = None) -> str:
    """The stable OpenAI id of the ``position``-th function call of a candidate (with its
    thought signature appended after :data:`SIGNATURE_MARK`, when it has one)."""
    seed = json.dumps([name, args, position], sort_keys=True, separators=(",", ":"))
    base = "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
    return f"{base}{SIGNATURE_MARK}{signature}" if signature else base


# --- OpenAI → Gemini ----------------------------------------------------------------------
def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def _image_part(url: str) -> JSON:
    """An image part of a ``data:`` URL (the adapter has fetched http(s) URLs into data URLs by
    then: :func:`inference.vendors.fetch.inline_images`)."""
    if not url.startswith("data:"):
        raise errors.VendorRejected(
            "Gemini takes images inline: send a data URL or an http(s) URL",
            status=400,
            code="invalid_image_url",
            param="messages",
        )
    header, _, data = url.partition(",")
    mime_type = header[5:].split(";")[0] or "image/png"
    return {"inlineData": {"mimeType": mime_type, "data": data}}


def _parts(content: Any) -> list[JSON]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[JSON] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"text": part.get("text", "")})
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append(_image_part(image["url"] if isinstance(image, dict) else image))
    return parts


def _call_part(call: JSON) -> JSON:
    function = call["function"]
    _, _, signature = str(call.get("id") or "").partition(SIGNATURE_MARK)
    part: JSON = {
        "functionCall": {
            "name": function["name"],
            "args": json.loads(function.get("arguments") or "{}"),
        }
    }
    # A call minted elsewhere (another vendor, or a client's own history) has no signature;
    # Gemini 3 refuses such a history unless it carries the placeholder Google documents for it.
    part["thoughtSignature"] = signature or FOREIGN_CALL_SIGNATURE
    return part


def _tool_output(content: Any) -> Any:
    text = _text_of(content)
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_contents(payload: JSON) -> tuple[list[JSON], list[str]]:
    """The request's ``contents`` (roles ``user`` / ``model``, consecutive turns of one role
    merged) and its system texts.

    Raises :class:`~inference.vendors.errors.VendorRejected` for a tool result whose
    ``tool_call_id`` names no earlier tool call (Gemini needs the function's name)."""
    system: list[str] = []
    contents: list[JSON] = []
    names: dict[str, str] = {}

    def append(role: str, parts: list[JSON]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for i, message in enumerate(payload["messages"]):
        role = message["role"]
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
        elif role == "user":
            append("user", _parts(message.get("content")))
        elif role == "assistant":
            parts = _parts(message.get("content"))
            for call in message.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
                parts.append(_call_part(call))
            append("model", parts)
        elif role in ("tool", "function"):
            name = message.get("name") if role == "function" else names.get(message["tool_call_id"])
            if not name:
                raise errors.VendorRejected(
                    "a tool message answers no tool call of an earlier assistant message",
                    status=400,
                    param=f"messages[{i}].tool_call_id",
                )
            response = {"name": name, "response": {"output": _tool_output(message["content"])}}
            append("user", [{"functionResponse": response}])
    return contents, system


def _tool_config(choice: Any) -> JSON | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        return {"functionCallingConfig": {"mode": _TOOL_MODES.get(choice, "AUTO")}}
    name = choice["function"]["name"]
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}


def _response_format(fmt: Any) -> JSON:
    kind = (fmt or {}).get("type")
    if kind == "json_object":
        return {"responseMimeType": "application/json"}
    if kind == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {"type": "object"}
        return {"responseMimeType": "application/json", "responseJsonSchema": schema}
    return {}


def generation_config(payload: JSON) -> JSON:
    """The request's ``generationConfig`` (sampling, limits, stop, choices, JSON output)."""
    config: JSON = {}
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("n", "candidateCount"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        if payload.get(ours) is not None:
            config[theirs] = payload[ours]
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
    if limit:
        config["maxOutputTokens"] = limit
    stop = payload.get("stop")
    if stop:
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    config.update(_response_format(payload.get("response_format")))
    return config


def to_gemini(payload: JSON) -> JSON:
    """An OpenAI chat request (its images as data URLs) as a Gemini
    ``GenerateContentRequest`` body (the model is in the URL)."""
    contents, system = to_contents(payload)
    body: JSON = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    if payload.get("tools"):
        declarations = []
        for tool in payload["tools"]:
            function = tool["function"]
            declaration: JSON = {"name": function["name"]}
            if function.get("description"):
                declaration["description"] = function["description"]
            if function.get("parameters"):
                # Full JSON Schema, as OpenAI takes it (``parameters`` is an OpenAPI subset).
                declaration["parametersJsonSchema"] = function["parameters"]
            declarations.append(declaration)
        body["tools"] = [{"functionDeclarations": declarations}]
        tool_config = _tool_config(payload.get("tool_choice"))
        if tool_config is not None:
            body["toolConfig"] = tool_config
    config = generation_config(payload)
    if config:
        body["generationConfig"] = config
    return body


# --- Gemini → OpenAI ----------------------------------------------------------------------
def _count(meta: JSON, name: str) -> int | None:
    value = meta.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def usage_from(meta: Any) -> JSON | None:
    """OpenAI usage for ``usageMetadata`` (see the module docstring); ``None`` when there is
    none or a count is not a non-negative integer."""
    if not isinstance(meta, dict):
        return None
    names = (
        "promptTokenCount",
        "toolUsePromptTokenCount",
        "cachedContentTokenCount",
        "candidatesTokenCount",
        "thoughtsTokenCount",
    )
    counts = [_count(meta, name) for name in names]
    if any(c is None for c in counts):
        return None
    prompt, tool_use, cached, candidates, thoughts = (int(c or 0) for c in counts)
    completion = candidates + thoughts
    return {
        "prompt_tokens": prompt + tool_use,
        "completion_tokens": completion,
        "total_tokens": prompt + tool_use + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": thoughts},
    }


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    """OpenAI's ``finish_reason`` for a candidate's ``finishReason`` (``None``: not finished)."""
    if not reason:
        return None
    if reason in _CONTENT_FILTER:
        return "content_filter"
    if reason == "MAX_TOKENS":
        return "length"
    return "tool_calls" if has_calls else "stop"


def check_prompt(body: JSON, vendor: str) -> None:
    """Raise ``VendorRejected`` (``content_filter``) when Gemini blocked the prompt."""
    reason = (body.get("promptFeedback") or {}).get("blockReason")
    if reason and not body.get("candidates"):
        raise errors.VendorRejected(
            f"{vendor} blocked the prompt ({reason})",
            status=400,
            vendor=vendor,
            code="content_filter",
        )


@dataclass(frozen=True, slots=True)
class Turn:
    """What one chunk (or a whole answer) of one candidate says, in OpenAI's terms."""

    text: str
    calls: list[JSON]
    finish_reason: str | None


def read_candidate(candidate: JSON, first_position: int = 0) -> Turn:
    """A candidate's visible text (thought summaries left out) and function calls (ids from
    :func:`call_id`, numbered from ``first_position``), and its finish reason."""
    text: list[str] = []
    calls: list[JSON] = []
    for part in (candidate.get("content") or {}).get("parts") or []:
        if "functionCall" in part:
            call = part["functionCall"]
            args = call.get("args") or {}
            position = first_position + len(calls)
            minted = call_id(call["name"], args, position, part.get("thoughtSignature"))
            calls.append(tool_call(minted, call["name"], args))
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            text.append(part["text"])
    reason = finish_reason(candidate.get("finishReason"), bool(calls))
    return Turn("".join(text), calls, reason)


def from_gemini(body: JSON, *, model: str, vendor: str) -> JSON:
    """A ``GenerateContentResponse`` as an OpenAI ``chat.completion`` (a blocked prompt
    raises, see :func:`check_prompt`)."""
    check_prompt(body, vendor)
    choices = []
    for candidate in sorted(body.get("candidates") or [], key=lambda c: c.get("index", 0)):
        turn = read_candidate(candidate)
        message: JSON = {"role": "assistant", "content": turn.text or None}
        if turn.calls:
            message["tool_calls"] = turn.calls
        choices.append(
            {
                "index": candidate.get("index", 0),
                "message": message,
                "finish_reason": turn.finish_reason or "stop",
                "logprobs": None,
            }
        )
    out: JSON = {
        "id": body.get("responseId", ""),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    usage = usage_from(body.get("usageMetadata"))
    if usage is not None:
        out["usage"] = usage
    return out


@dataclass
class ChunkTranslator:
    """Turns streamed ``GenerateContentResponse`` events into ``chat.completion.chunk`` dicts.

    Each event is a delta (text and whole function calls) of one or more candidates; the
    ``usageMetadata`` of the latest event that has one is the call's (:meth:`usage_chunk`).
    """

    model: str
    vendor: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    usage: JSON | None = None
    started: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)
    calls_seen: dict[int, int] = field(default_factory=dict)

    def _chunk(self, index: int, delta: JSON, finish: str | None = None) -> JSON:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
            ],
        }

    def feed(self, data: JSON) -> list[JSON]:
        """The OpenAI chunks for one event (possibly none). A blocked prompt or an error event
        raises :class:`~inference.vendors.errors.VendorError`."""
        if "error" in data:
            raise error_from(500, data, vendor=self.vendor)
        check_prompt(data, self.vendor)
        self.id = self.id or str(data.get("responseId") or "")
        if "usageMetadata" in data:
            self.usage = usage_from(data["usageMetadata"])
        chunks: list[JSON] = []
        for candidate in data.get("candidates") or []:
            index = int(candidate.get("index", 0))
            seen = self.calls_seen.get(index, 0)
            turn = read_candidate(candidate, seen)
            self.calls_seen[index] = seen + len(turn.calls)
            delta: JSON = {}
            if index not in self.started:
                self.started.add(index)
                delta["role"] = "assistant"
            if turn.text or "role" in delta:
                delta["content"] = turn.text
            if turn.calls:
                delta["tool_calls"] = [
                    {"index": seen + i, **call} for i, call in enumerate(turn.calls)
                ]
            if delta:
                chunks.append(self._chunk(index, delta))
            if turn.finish_reason is not None:
                reason = turn.finish_reason
                if reason == "stop" and self.calls_seen[index]:
                    reason = "tool_calls"  # the calls came in an earlier event
                self.finished.add(index)
                chunks.append(self._chunk(index, {}, reason))
        return chunks

    def complete(self) -> bool:
        """Whether every candidate that started has finished."""
        return bool(self.finished) and self.started <= self.finished

    def usage_chunk(self) -> JSON | None:
        """The final chunk carrying the call's usage (``None`` when Gemini reported none)."""
        if self.usage is None:
            return None
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage,
        }


# --- errors -------------------------------------------------------------------------------
def _details(error: JSON, kind: str) -> list[JSON]:
    return [
        d
        for d in error.get("details") or []
        if isinstance(d, dict) and str(d.get(_TYPE, "")).endswith(kind)
    ]


def _rate_limit_message(vendor: str, error: JSON, message: str) -> str:
    """Says whether a 429 is a quota running out (per day) or a rate limit (per minute)."""
    quota_ids = [
        str(v.get("quotaId", ""))
        for d in _details(error, "google.rpc.QuotaFailure")
        for v in d.get("violations") or []
        if isinstance(v, dict)
    ]
    if any("PerDay" in q for q in quota_ids):
        which = "daily quota exhausted"
    elif quota_ids:
        which = "rate limit reached"
    else:
        which = "rate limit or quota reached (the vendor did not say which)"
    delay = next((str(d.get("retryDelay")) for d in _details(error, "RetryInfo")), "")
    retry = f"; retry in {delay}" if delay else ""
    return f"{vendor} returned 429 RESOURCE_EXHAUSTED, {which}{retry}: {message}"[:500]


def error_from(
    status: int, body: Any, *, vendor: str, retry_after: str | None = None
) -> errors.VendorError:
    """The error for a Gemini error answer ``{"error": {"code", "message", "status",
    "details"}}`` with HTTP ``status`` (its ``code`` wins when it has one): 429 /
    ``RESOURCE_EXHAUSTED`` is rate-limited (the message says quota or rate), a refused or
    invalid key and ``PERMISSION_DENIED`` / ``UNAUTHENTICATED`` / ``NOT_FOUND`` are
    misconfiguration, 5xx a server error, any other 4xx a rejection (a prompt over the input
    limit as ``context_length_exceeded`` on ``messages``)."""
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else status
    grpc = str(error.get("status") or "")
    message = str(error.get("message") or "")[:400]
    text = f"{vendor} returned {status} {grpc}: {message}"[:500]
    if status == 429 or grpc == "RESOURCE_EXHAUSTED":
        return errors.VendorRateLimited(
            _rate_limit_message(vendor, error, message), status=429, vendor=vendor
        )
    reasons = {str(d.get("reason", "")) for d in _details(error, "google.rpc.ErrorInfo")}
    if grpc in _MISCONFIGURED or reasons & _KEY_REASONS:
        return errors.VendorMisconfigured(text, status=status, vendor=vendor)
    overflow = status < 500 and bool(_OVERFLOW.search(message))
    return errors.from_status(
        status,
        text,
        vendor=vendor,
        code="context_length_exceeded" if overflow else None,
        param="messages" if overflow else None,
        retry_after=retry_after,
    )


def _raise(target: VendorTarget, response: http.VendorResponse) -> NoReturn:
    try:
        body = response.json()
    except ValueError:
        body = None
    raise error_from(
        response.status,
        body,
        vendor=target.vendor,
        retry_after=response.headers.get("retry-after"),
    )


# --- embeddings ---------------------------------------------------------------------------
def embed_request(payload: JSON, model: str, vendor: str) -> JSON:
    """An OpenAI embeddings request as a ``BatchEmbedContentsRequest`` (text inputs only)."""
    raw = payload["input"]
    items = [raw] if isinstance(raw, str) else list(raw)
    if not all(isinstance(item, str) for item in items):
        raise errors.VendorRejected(
            f"{vendor} embeds text, not token ids", status=400, vendor=vendor, param="input"
        )
    name = model_path(model)
    requests = []
    for item in items:
        request: JSON = {"model": name, "content": {"parts": [{"text": item}]}}
        if payload.get("dimensions") is not None:
            request["outputDimensionality"] = payload["dimensions"]
        requests.append(request)
    return {"requests": requests}


def embed_response(body: Any, *, model: str, vendor: str) -> JSON:
    """A ``BatchEmbedContentsResponse`` as OpenAI's embeddings list; ``usage`` only where
    Gemini reported a prompt token count (it does not today: the gateway counts then)."""
    embeddings = body.get("embeddings") if isinstance(body, dict) else None
    if not isinstance(embeddings, list) or not all(
        isinstance(e, dict) and isinstance(e.get("values"), list) for e in embeddings
    ):
        raise errors.VendorProtocolError(
            f"{vendor} answered something that is not a list of embeddings", vendor=vendor
        )
    out: JSON = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": e["values"]}
            for i, e in enumerate(embeddings)
        ],
        "model": model,
    }
    meta = body.get("usageMetadata")
    count = _count(meta, "promptTokenCount") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and "promptTokenCount" in meta and count is not None:
        out["usage"] = {"prompt_tokens": count, "total_tokens": count}
    return out


# --- the adapter --------------------------------------------------------------------------
class GeminiAdapter(UnservedEndpoints):
    """Adapter for Google's Gemini API (chat, streaming, tools, vision, JSON, embeddings)."""

    def _auth(self, target: VendorTarget) -> dict[str, str]:
        return {API_KEY_HEADER: target.api_key} if target.api_key else {}

    async def _body(self, target: VendorTarget, payload: JSON) -> JSON:
        return to_gemini(await fetch.inline_images(payload, target))

    async def chat(self, target: VendorTarget, payload: JSON) -> JSON:
        body = await self._body(target, payload)
        path = f"{model_path(target.upstream_model)}:generateContent"
        response = await http.request(target, "POST", path, auth=self._auth(target), json_body=body)
        if response.status >= 400:
            _raise(target, response)
        try:
            answer = response.json()
            return from_gemini(answer, model=target.upstream_model, vendor=target.vendor)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered an unreadable generateContent response",
                vendor=target.vendor,
            ) from exc

    async def stream_chat(self, target: VendorTarget, payload: JSON) -> AsyncGenerator[JSON, None]:
        body = await self._body(target, payload)
        path = f"{model_path(target.upstream_model)}:streamGenerateContent?alt=sse"
        async with http.stream(
            target, "POST", path, auth=self._auth(target), json_body=body
        ) as response:
            if response.status >= 400:
                _raise(target, await response.read())
            translator = ChunkTranslator(target.upstream_model, target.vendor)
            async for _event, data in events(response.lines()):
                try:
                    parsed = jsonio.loads(data)
                except ValueError:
                    raise errors.malformed_event(target.vendor) from None
                if not isinstance(parsed, dict):
                    raise errors.malformed_event(target.vendor)
                try:
                    chunks = translator.feed(parsed)
                except (KeyError, TypeError, AttributeError, ValueError):
                    raise errors.malformed_event(target.vendor) from None
                for chunk in chunks:
                    yield chunk
            if not translator.complete():
                raise errors.VendorUnavailable(
                    f"{target.vendor} ended the stream before a finishReason",
                    vendor=target.vendor,
                )
            usage = translator.usage_chunk()
            if usage is not None:
                yield usage

    async def embed(self, target: VendorTarget, payload: JSON) -> JSON:
        body = embed_request(payload, target.upstream_model, target.vendor)
        path = f"{model_path(target.upstream_model)}:batchEmbedContents"
        response = await http.request(target, "POST", path, auth=self._auth(target), json_body=body)
        if response.status >= 400:
            _raise(target, response)
        try:
            answer = response.json()
        except ValueError:
            raise errors.VendorProtocolError(
                f"{target.vendor} answered with a body that is not JSON", vendor=target.vendor
            ) from None
        return embed_response(answer, model=target.upstream_model, vendor=target.vendor)
