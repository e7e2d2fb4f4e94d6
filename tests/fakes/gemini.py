"""A fake Gemini API (``v1beta``): a real HTTP server on 127.0.0.1 in Google's wire format.

Built from the official ``google-genai`` SDK's request building and types (``models.py``,
``types.py``, ``_api_client.py``) and checked by driving it with that SDK
(``tests/vendors/test_gemini_fidelity.py``). Routes, under :attr:`FakeGemini.url` (the vendor's
``base_url``; the SDK's ``base_url`` is :attr:`FakeGemini.root`):

- ``GET models`` — ``{"models": [{"name": "models/…", …}], "nextPageToken"}``, paged by
  ``pageSize`` / ``pageToken``;
- ``POST models/{model}:generateContent`` — a ``GenerateContentResponse``;
- ``POST models/{model}:streamGenerateContent?alt=sse`` — SSE ``data:`` events (``\\r\\n``
  line ends, as Google sends them), one word per event, function calls whole, the last event
  with ``finishReason``; every event carries the running ``usageMetadata``; the stream then
  simply ends;
- ``POST models/{model}:batchEmbedContents`` — ``{"embeddings": [{"values": […]}]}`` (no usage,
  like Gemini).

Deterministic like :class:`tests.fakes.vendors.FakeVendor`: the reply is ``"Echo: <last user
text>"``, one token per word of the prompt and of the reply (85 per image); with tools (and a
mode other than ``NONE``) the answer calls the first two functions with ``{"city": "Paris"}``,
each call with a ``thoughtSignature``; a JSON ``responseMimeType`` answers ``{"ok": true}``; a
last turn of function responses answers ``"Echo: <their outputs>"``.

Steering: ``fail_statuses`` (answered before behaving, in Google's error shape ``{"error":
{"code", "message", "status", "details"}}``; a 429 says per-minute rate limit, or per-day quota
with ``quota_exhausted``), ``block_reason`` (the prompt is blocked: ``promptFeedback`` and no
candidates), ``finish`` (a finish reason such as ``SAFETY`` cuts the answer after its first
word), ``cached_tokens`` / ``thoughts_tokens`` (reported in ``usageMetadata``), ``cut_after``
(drop a stream after N events), ``max_page_size`` (the listing's longest page),
``require_signatures`` (refuse a function call sent back without its signature, as Gemini 3
does). The key must be ``api_key`` in ``x-goog-api-key`` (else a 400 ``API_KEY_INVALID``, or a
403 when absent).
Every request is kept in ``requests`` (method, path, key, query and body).
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer
from tests.fakes.vendors import fake_embedding

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# What a GenerateContentRequest may hold (models.py, _GenerateContentParameters_to_mldev and
# _GenerateContentConfig_to_mldev); anything else is Google's "Unknown name" 400.
_REQUEST_FIELDS = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
}
_CONFIG_FIELDS = {
    "temperature",
    "topP",
    "topK",
    "candidateCount",
    "maxOutputTokens",
    "stopSequences",
    "responseLogprobs",
    "logprobs",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "mediaResolution",
    "speechConfig",
    "thinkingConfig",
    "imageConfig",
    "enableEnhancedCivicAnswers",
}
_PART_FIELDS = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
}
_PART_EXTRAS = {"thought", "thoughtSignature", "videoMetadata", "mediaResolution", "partMetadata"}
_MODES = {"AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"}


class Refused(Exception):
    """A request the fake answers with a Google error (``status``, ``message``)."""

    def __init__(self, status: int, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details or []


def error_body(status: int, message: str, details: list[dict[str, Any]] | None = None) -> dict:
    """Google's error answer."""
    error: dict[str, Any] = {"code": status, "message": message, "status": _STATUS[status]}
    if details:
        error["details"] = details
    return {"error": error}


def signature(name: str) -> str:
    """The (base64) thought signature the fake gives its call of ``name``."""
    return base64.b64encode(f"sig:{name}".encode()).decode()


def _words(text: str) -> int:
    return len(text.split())


def _check_parts(parts: Any, where: str) -> None:
    if not isinstance(parts, list) or not parts:
        raise Refused(400, f"* {where}.parts: contents.parts must not be empty.")
    for part in parts:
        if not isinstance(part, dict):
            raise Refused(400, f"Invalid value at '{where}.parts'")
        kinds = [k for k in part if k in _PART_FIELDS]
        unknown = [k for k in part if k not in _PART_FIELDS | _PART_EXTRAS]
        if unknown:
            raise Refused(400, f'Invalid JSON payload received. Unknown name "{unknown[0]}"')
        if len(kinds) != 1:
            raise Refused(400, f"* {where}.parts: a part must hold exactly one kind of data")
        if "inlineData" in part:
            blob = part["inlineData"]
            if not blob.get("mimeType") or not isinstance(blob.get("data"), str):
                raise Refused(400, f"* {where}: inlineData needs mimeType and data")
            base64.b64decode(blob["data"], validate=True)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _camel_keys(obj: Any) -> Any:
    return {_camel(k): v for k, v in obj.items()} if isinstance(obj, dict) else obj


def normalized(body: Any) -> Any:
    """``body`` with the proto field names Google also accepts (``parameters_json_schema``, as
    the SDK sends a function declaration) in their lowerCamelCase JSON form, at every level
    the fake reads (never inside schemas or arguments, whose names are the caller's)."""
    if not isinstance(body, dict):
        return body
    out = _camel_keys(copy.deepcopy(body))
    if isinstance(out.get("generationConfig"), dict):
        out["generationConfig"] = _camel_keys(out["generationConfig"])
    contents = [out.get("systemInstruction"), *(out.get("contents") or [])]
    for content in contents:
        if isinstance(content, dict) and isinstance(content.get("parts"), list):
            content["parts"] = [_camel_keys(part) for part in content["parts"]]
    for tool in out.get("tools") or []:
        if isinstance(tool, dict):
            tool.update(_camel_keys(tool))
            declarations = tool.get("functionDeclarations") or []
            tool["functionDeclarations"] = [_camel_keys(d) for d in declarations]
    return out


def check_request(body: Any) -> None:
    """Raise :class:`Refused` where Gemini would refuse ``body`` (:func:`normalized`) as a
    GenerateContentRequest."""
    if not isinstance(body, dict):
        raise Refused(400, "Invalid JSON payload received.")
    unknown = [k for k in body if k not in _REQUEST_FIELDS]
    if unknown:
        raise Refused(400, f'Invalid JSON payload received. Unknown name "{unknown[0]}"')
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Refused(400, "* GenerateContentRequest.contents: contents is not specified")
    for i, content in enumerate(contents):
        if content.get("role", "user") not in ("user", "model"):
            raise Refused(400, f"Please use a valid role: user, model. (contents[{i}])")
        _check_parts(content.get("parts"), f"contents[{i}]")
    if "systemInstruction" in body:
        _check_parts(body["systemInstruction"].get("parts"), "system_instruction")
    config = body.get("generationConfig") or {}
    unknown = [k for k in config if k not in _CONFIG_FIELDS]
    if unknown:
        raise Refused(
            400, f'Invalid JSON payload received. Unknown name "{unknown[0]}" at generation_config'
        )
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    if mode is not None and mode not in _MODES:
        raise Refused(400, f"Invalid value at 'tool_config.function_calling_config.mode' ({mode})")
    for tool in body.get("tools") or []:
        for declaration in tool.get("functionDeclarations") or []:
            if "parameters" in declaration and "parametersJsonSchema" in declaration:
                raise Refused(400, "parameters and parametersJsonSchema are mutually exclusive")


def _user_text(content: dict[str, Any]) -> str:
    texts = [p["text"] for p in content.get("parts", []) if "text" in p]
    outputs = [
        json.dumps(p["functionResponse"].get("response", {}).get("output"))
        for p in content.get("parts", [])
        if "functionResponse" in p
    ]
    return " ".join(texts + outputs)


def _prompt_tokens(body: dict[str, Any]) -> int:
    total = 0
    for content in [*body["contents"], body.get("systemInstruction") or {"parts": []}]:
        for part in content.get("parts", []):
            if "text" in part:
                total += _words(part["text"])
            elif "inlineData" in part or "fileData" in part:
                total += 85
            elif "functionCall" in part:
                total += 1 + _words(json.dumps(part["functionCall"].get("args", {})))
            elif "functionResponse" in part:
                total += _words(json.dumps(part["functionResponse"].get("response", {})))
    return total


@dataclass
class FakeGemini(ThreadedServer):
    """One fake Gemini API server."""

    models: list[str] = field(default_factory=lambda: ["gemini-fake", "gemini-embed-fake"])
    api_key: str = "gm-test-key"
    fail_statuses: list[int] = field(default_factory=list)
    quota_exhausted: bool = False
    block_reason: str = ""
    finish: str = ""
    cached_tokens: int = 0
    thoughts_tokens: int = 0
    cut_after: int | None = None
    require_signatures: bool = True
    max_page_size: int = 1000  # the longest page of the model listing (Google's cap is 1000)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.serve_on_free_port("fake-gemini")
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1beta"

    def reset(self) -> None:
        """Forget requests and behaviours (between tests)."""
        self.fail_statuses = []
        self.quota_exhausted = False
        self.block_reason = ""
        self.finish = ""
        self.cached_tokens = 0
        self.thoughts_tokens = 0
        self.cut_after = None
        self.require_signatures = True
        self.max_page_size = 1000
        self.requests = []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/v1beta/models", self.list_models)
        router.add_post("/v1beta/models/{call}", self.model_call)

    # --- gate --------------------------------------------------------------------------
    def _failure(self) -> web.Response | None:
        if not self.fail_statuses:
            return None
        status = self.fail_statuses.pop(0)
        details: list[dict[str, Any]] = []
        if status == 429:
            quota = "GenerateRequestsPer{}PerProjectPerModel-FreeTier".format(
                "Day" if self.quota_exhausted else "Minute"
            )
            details = [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [{"quotaMetric": "generate_requests", "quotaId": quota}],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
            ]
        body = error_body(status, f"fake failure {status}", details)
        return web.json_response(body, status=status)

    def _auth(self, request: web.Request) -> web.Response | None:
        key = request.headers.get("x-goog-api-key")
        if key is None:
            body = error_body(403, "Method doesn't allow unregistered callers.")
            return web.json_response(body, status=403)
        if key != self.api_key:
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
            }
            body = error_body(400, "API key not valid. Please pass a valid API key.", [info])
            return web.json_response(body, status=400)
        return None

    async def _keep(self, request: web.Request) -> Any:
        body = await request.json() if request.can_read_body else None
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "key": request.headers.get("x-goog-api-key"),
                "body": body,
            }
        )
        return body

    # --- models ------------------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.Response:
        await self._keep(request)
        refused = self._auth(request) or self._failure()
        if refused is not None:
            return refused
        size = min(int(request.query.get("pageSize", 50)), self.max_page_size)
        start = int(request.query.get("pageToken", 0))
        page = self.models[start : start + size]
        out: dict[str, Any] = {
            "models": [
                {
                    "name": f"models/{m}",
                    "displayName": m,
                    "inputTokenLimit": 32000,
                    "outputTokenLimit": 4096,
                    "supportedGenerationMethods": (
                        ["embedContent"] if "embed" in m else ["generateContent", "countTokens"]
                    ),
                }
                for m in page
            ]
        }
        if start + size < len(self.models):
            out["nextPageToken"] = str(start + size)
        return web.json_response(out)

    async def model_call(self, request: web.Request) -> web.StreamResponse:
        body = await self._keep(request)
        refused = self._auth(request) or self._failure()
        if refused is not None:
            return refused
        model, _, method = request.match_info["call"].rpartition(":")
        if model not in self.models:
            return web.json_response(
                error_body(404, f"models/{model} is not found for API version v1beta"),
                status=404,
            )
        body = normalized(body)
        try:
            if method == "generateContent":
                return web.json_response(self._generate(model, body))
            if method == "streamGenerateContent":
                if request.query.get("alt") != "sse":
                    raise Refused(400, "the fake streams SSE only (alt=sse)")
                return await self._stream(request, model, body)
            if method == "batchEmbedContents":
                return web.json_response(self._embed(model, body))
            raise Refused(404, f"Method {method} not found")
        except Refused as exc:
            return web.json_response(
                error_body(exc.status, exc.message, exc.details), status=exc.status
            )

    # --- generation --------------------------------------------------------------------
    def _answer(self, body: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
        """The reply's words and function-call parts for a checked request."""
        contents = body["contents"]
        if self.require_signatures:
            for content in contents:
                calls = [p for p in content["parts"] if "functionCall" in p]
                if calls and "thoughtSignature" not in calls[0]:
                    raise Refused(
                        400,
                        "Function call is missing a thought_signature in functionCall parts.",
                    )
        last = contents[-1]
        answered = any("functionResponse" in p for p in last["parts"])
        declarations = [
            d for tool in body.get("tools") or [] for d in tool.get("functionDeclarations") or []
        ]
        mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
        if declarations and mode != "NONE" and not answered:
            allowed = (body["toolConfig"]["functionCallingConfig"].get("allowedFunctionNames")
                       if mode == "ANY" else None)  # fmt: skip
            names = [d["name"] for d in declarations if not allowed or d["name"] in allowed]
            parts = [
                {
                    "functionCall": {"name": name, "args": {"city": "Paris"}},
                    "thoughtSignature": signature(name),
                }
                for name in names[:2]
            ]
            return [], parts
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            return ['{"ok":', "true}"], []
        user = next((c for c in reversed(contents) if c.get("role", "user") == "user"), last)
        return ("Echo: " + _user_text(user)).split(" "), []

    def _usage(self, body: dict[str, Any], completion: int) -> dict[str, Any]:
        prompt = _prompt_tokens(body)
        usage: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": completion,
            "totalTokenCount": prompt + completion + self.thoughts_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        if self.cached_tokens:
            usage["cachedContentTokenCount"] = min(self.cached_tokens, prompt)
        if self.thoughts_tokens:
            usage["thoughtsTokenCount"] = self.thoughts_tokens
        return usage

    def _blocked(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "promptFeedback": {
                "blockReason": self.block_reason,
                "safetyRatings": [
                    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
                ],
            },
            "usageMetadata": {"promptTokenCount": _prompt_tokens(body), "totalTokenCount": 0},
            "modelVersion": "gemini-fake-001",
            "responseId": "resp-fake",
        }

    def _prepare(self, body: Any) -> tuple[list[str], list[dict[str, Any]], int, str]:
        words, calls = self._answer(body)
        finish = self.finish or "STOP"
        if self.finish and self.finish != "STOP":
            words, calls = words[:1], []
        n = int((body.get("generationConfig") or {}).get("candidateCount") or 1)
        return words, calls, n, finish

    def _generate(self, model: str, body: Any) -> dict[str, Any]:
        check_request(body)
        if self.block_reason:
            return self._blocked(body)
        words, calls, n, finish = self._prepare(body)
        parts: list[dict[str, Any]] = [{"text": " ".join(words)}] if words else []
        parts += calls
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": finish}
        completion = (len(words) + len(calls)) * n
        return {
            "candidates": [{**candidate, "index": i} for i in range(n)],
            "usageMetadata": self._usage(body, completion),
            "modelVersion": f"{model}-001",
            "responseId": "resp-fake",
        }

    async def _stream(self, request: web.Request, model: str, body: Any) -> web.StreamResponse:
        check_request(body)
        events: list[dict[str, Any]]
        if self.block_reason:
            events = [self._blocked(body)]
        else:
            words, calls, n, finish = self._prepare(body)
            events = []
            sent = 0
            pieces: list[list[dict[str, Any]]] = [
                [{"text": word if i == 0 else " " + word}] for i, word in enumerate(words)
            ]
            if calls:
                pieces.append(calls)
            for j, parts in enumerate(pieces):
                sent += len(parts)
                last = j == len(pieces) - 1
                candidates = []
                for i in range(n):
                    candidate: dict[str, Any] = {
                        "content": {"role": "model", "parts": parts},
                        "index": i,
                    }
                    if last:
                        candidate["finishReason"] = finish
                    candidates.append(candidate)
                event = {
                    "candidates": candidates,
                    "usageMetadata": self._usage(body, sent * n),
                    "modelVersion": f"{model}-001",
                    "responseId": "resp-fake",
                }
                if not last:  # the running count has no thoughts until the end
                    event["usageMetadata"].pop("thoughtsTokenCount", None)
                events.append(event)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i, event in enumerate(events):
            if self.cut_after is not None and i >= self.cut_after:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
        await response.write_eof()
        return response

    # --- embeddings --------------------------------------------------------------------
    def _embed(self, model: str, body: Any) -> dict[str, Any]:
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            raise Refused(400, "* BatchEmbedContentsRequest.requests: must not be empty")
        embeddings = []
        for i, item in enumerate(requests):
            if item.get("model") != f"models/{model}":
                raise Refused(
                    400,
                    f"* BatchEmbedContentsRequest.requests[{i}].model: the model must be "
                    f"models/{model}",
                )
            _check_parts((item.get("content") or {}).get("parts"), f"requests[{i}].content")
            text = " ".join(p.get("text", "") for p in item["content"]["parts"])
            dimensions = int(item.get("outputDimensionality") or 8)
            embeddings.append({"values": fake_embedding(text, dimensions)})
        return {"embeddings": embeddings}
