"""A fake Azure OpenAI resource: a real HTTP server on 127.0.0.1 answering as Azure's data plane.

Modelled on Azure's REST reference (``azure-rest-api-specs``, data-plane ``AzureOpenAI``
``inference/stable/2024-10-21`` and ``authoring/stable/2024-10-21`` for ``GET /models``) and on
what the official ``openai`` SDK's ``AzureOpenAI`` client sends (``openai/lib/azure.py``):

- Routes live under ``/openai`` (``url`` is that base; ``endpoint`` is what the SDK's
  ``azure_endpoint`` takes): ``POST /openai/deployments/{deployment}/chat/completions``,
  ``…/embeddings``, ``…/images/generations`` and ``GET /openai/models``. Every route wants the
  ``api-version`` query parameter: without it, or with one the fake does not serve, the answer
  is Azure's 404 ``{"error": {"code": "404", "message": "Resource not found"}}``.
- The key is the ``api-key`` header (a bearer token is not one): a wrong or missing key is
  Azure's 401 (``code: "401"``, "Access denied due to invalid subscription key …"). An unknown
  deployment is the 404 ``DeploymentNotFound``.
- Answers carry Azure's content-filter annotations: ``prompt_filter_results`` and each
  choice's ``content_filter_results``. A stream begins with the chunk Azure sends first —
  ``choices: []``, empty ``id``/``model``/``object``, ``created: 0`` and the
  ``prompt_filter_results`` — then a role chunk, one chunk per word, a finish chunk and, with
  ``stream_options.include_usage``, a usage chunk (the other chunks then carry ``usage:
  null``), then ``[DONE]``. ``model`` is the deployment's model (``deployments`` maps names to
  models), not the deployment's name.

Steering: ``fail_statuses`` (statuses to answer first, in Azure's error shape; 429s with
``retry-after`` and ``retry-after-ms`` from ``retry_after_ms``; ``quota`` makes a 429 the
quota-exhausted kind), ``content_filter`` (``"prompt"``: the 400 ``content_filter`` refusal
with its ``innererror``; ``"completion"``: the answer stops after its first word with
finish reason ``content_filter``), ``cached_tokens`` (reported as cached prompt tokens).
``requests`` keeps each POST's body, ``calls`` each request's path, deployment, api-version
and credential headers.

Answers are FakeVendor's (``tests.fakes.vendors``): ``"Echo: <last user text>"``, one token
per word of the prompt and the reply; tools get a call per tool (at most two) with arguments
``{"city": "Paris"}``; JSON output is ``{"ok": true}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer
from tests.fakes.vendors import _count_words, _last_user_text, fake_embedding, png_bytes

API_KEY = "azure-fake-key"
# The dated api-versions the fake serves (GA and preview spellings); anything else is a 404.
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
SAFE = {"filtered": False, "severity": "safe"}
CATEGORIES = ("hate", "self_harm", "sexual", "violence")
DEFAULT_DEPLOYMENTS = {
    "chat-prod": "gpt-4o-2024-08-06",
    "embed-prod": "text-embedding-3-small",
    "images-prod": "dall-e-3",
}


def _filter_results(flagged: str = "") -> dict[str, Any]:
    """A ``content_filter_results`` object: every category safe, ``flagged`` filtered (high)."""
    results: dict[str, Any] = {c: dict(SAFE) for c in CATEGORIES}
    if flagged:
        results[flagged] = {"filtered": True, "severity": "high"}
    return results


def _prompt_filter_results() -> list[dict[str, Any]]:
    results = {**_filter_results(), "jailbreak": {"filtered": False, "detected": False}}
    return [{"prompt_index": 0, "content_filter_results": results}]


def azure_error(
    http_status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    **more: Any,
) -> web.Response:
    """Azure's error answer, ``{"error": {"code", "message", **more}}``, with ``http_status``."""
    body = {"error": {"code": code, "message": message, **more}}
    return web.json_response(body, status=http_status, headers=headers)


def _failure(status: int, *, quota: bool, retry_after_ms: int, api_version: str) -> web.Response:
    """The error Azure answers with ``status`` (as its services word them)."""
    if status == 429:
        seconds = max(1, -(-retry_after_ms // 1000))
        message = (
            f"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
            f"{api_version} have exceeded token rate limit of your current OpenAI S0 pricing "
            f"tier. Please retry after {seconds} seconds."
        )
        if quota:
            message = "You exceeded your current quota, please check your plan and billing."
        return azure_error(
            429,
            "insufficient_quota" if quota else "429",
            message,
            headers={"retry-after": str(seconds), "retry-after-ms": str(retry_after_ms)},
        )
    if status == 401:
        return _access_denied()
    if status == 403:
        return azure_error(
            403, "403", "Public access is disabled. Please configure private endpoint."
        )
    if status == 404:
        return _deployment_not_found()
    if status >= 500:
        return azure_error(
            status,
            "InternalServerError",
            "The server had an error while processing your request. Sorry about that!",
        )
    return azure_error(status, "BadRequest", f"fake failure {status}", param=None, type=None)


def _access_denied() -> web.Response:
    return azure_error(
        401,
        "401",
        "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
        "provide a valid key for an active subscription and use a correct regional API "
        "endpoint for your resource.",
    )


def _deployment_not_found() -> web.Response:
    return azure_error(
        404,
        "DeploymentNotFound",
        "The API deployment for this resource does not exist. If you created the deployment "
        "within the last 5 minutes, please wait a moment and try again.",
    )


def _content_filter_refusal() -> web.Response:
    return azure_error(
        400,
        "content_filter",
        "The response was filtered due to the prompt triggering Azure OpenAI's content "
        "management policy. Please modify your prompt and retry.",
        param="prompt",
        status=400,
        innererror={
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": _filter_results("violence"),
        },
    )


def _reply(body: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    """FakeVendor's answer to a chat body: its text and its tool calls."""
    tools = body.get("tools")
    if tools and body.get("tool_choice") != "none":
        calls = [
            {"id": f"call_{i}", "name": t["function"]["name"], "arguments": '{"city": "Paris"}'}
            for i, t in enumerate(tools[:2])
        ]
        return "", calls
    if (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        return '{"ok": true}', []
    return "Echo: " + _last_user_text(body.get("messages", [])), []


@dataclass
class FakeAzureOpenAI(ThreadedServer):
    """One fake Azure OpenAI resource (see the module docstring)."""

    deployments: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_DEPLOYMENTS))
    api_key: str = API_KEY
    base_models: list[str] = field(
        default_factory=lambda: ["gpt-4o", "text-embedding-3-small", "dall-e-3"]
    )
    fail_statuses: list[int] = field(default_factory=list)
    quota: bool = False
    retry_after_ms: int = 1500
    content_filter: str = ""  # "prompt" | "completion"
    cached_tokens: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.serve_on_free_port("fake-azure")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.url = self.endpoint + "/openai"

    def reset(self) -> None:
        """Forget requests and behaviours (between tests)."""
        self.fail_statuses = []
        self.quota = False
        self.retry_after_ms = 1500
        self.content_filter = ""
        self.cached_tokens = 0
        self.requests = []
        self.calls = []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/openai/models", self.list_models)
        deployment = "/openai/deployments/{deployment}"
        router.add_post(deployment + "/chat/completions", self.chat)
        router.add_post(deployment + "/embeddings", self.embeddings)
        router.add_post(deployment + "/images/generations", self.images)
        router.add_get("/openai/files/{name}.png", self.image_file)
        router.add_route("*", "/{path:.*}", self.not_found)

    # --- the checks every route makes ----------------------------------------------------
    def _refusal(self, request: web.Request) -> web.Response | None:
        """Azure's answer to a request it does not serve (version, key, deployment), or
        ``None`` for one it does."""
        version = request.query.get("api-version", "")
        if not API_VERSION.match(version):
            return azure_error(404, "404", "Resource not found")
        if request.headers.get("api-key") != self.api_key:
            return _access_denied()
        deployment = request.match_info.get("deployment")
        if deployment is not None and deployment not in self.deployments:
            return _deployment_not_found()
        return None

    async def _gate(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        """The request's body and, when it is not to be answered normally, the answer."""
        refusal = self._refusal(request)
        body = await request.json() if request.can_read_body else {}
        self.requests.append(body)
        self._record(request)
        if refusal is not None:
            return body, refusal
        if self.fail_statuses:
            status = self.fail_statuses.pop(0)
            failure = _failure(
                status,
                quota=self.quota,
                retry_after_ms=self.retry_after_ms,
                api_version=request.query["api-version"],
            )
            return body, failure
        if self.content_filter == "prompt" and "messages" in body:
            return body, _content_filter_refusal()
        return body, None

    def _record(self, request: web.Request) -> None:
        self.calls.append(
            {
                "path": request.path,
                "deployment": request.match_info.get("deployment"),
                "api_version": request.query.get("api-version"),
                "api_key": request.headers.get("api-key"),
                "authorization": request.headers.get("authorization"),
            }
        )

    async def not_found(self, request: web.Request) -> web.Response:
        return azure_error(404, "404", "Resource not found")

    # --- routes ---------------------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request)
        self._record(request)
        if refusal is not None:
            return refusal
        data = [
            {
                "id": model,
                "status": "succeeded",
                "capabilities": {"inference": True, "chat_completion": True},
                "lifecycle_status": "generally-available",
                "created_at": 1646126127,
                "object": "model",
            }
            for model in self.base_models
        ]
        return web.json_response({"data": data, "object": "list"})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        model = self.deployments[request.match_info["deployment"]]
        text, calls = _reply(body)
        words = text.split(" ") if text else []
        finish = "tool_calls" if calls else "stop"
        if self.content_filter == "completion":
            words, calls, finish = words[:1], [], "content_filter"
        prompt = _count_words(body.get("messages", []))
        completion = len(words) + len(calls)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": min(self.cached_tokens, prompt)},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
        if body.get("stream"):
            return await self._stream(request, body, model, words, calls, finish, usage)
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(words) or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        flagged = "violence" if finish == "content_filter" else ""
        return web.json_response(
            {
                "id": "chatcmpl-azure-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "prompt_filter_results": _prompt_filter_results(),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": finish,
                        "logprobs": None,
                        "content_filter_results": _filter_results(flagged),
                    }
                ],
                "system_fingerprint": "fp_azure_fake",
                "usage": usage,
            }
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        model: str,
        words: list[str],
        calls: list[dict[str, str]],
        finish: str,
        usage: dict[str, Any],
    ) -> web.StreamResponse:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())

        def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            flagged = "violence" if reason == "content_filter" else ""
            obj: dict[str, Any] = {
                "id": "chatcmpl-azure-fake",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_azure_fake",
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "finish_reason": reason,
                        "logprobs": None,
                        "content_filter_results": _filter_results(flagged) if reason else {},
                    }
                ],
            }
            if include_usage:
                obj["usage"] = None
            return obj

        events: list[dict[str, Any]] = [
            {
                "choices": [],
                "created": 0,
                "id": "",
                "model": "",
                "object": "",
                "prompt_filter_results": _prompt_filter_results(),
            },
            chunk({"role": "assistant", "content": ""}),
        ]
        for i, word in enumerate(words):
            piece = chunk({"content": word if i == 0 else " " + word})
            piece["choices"][0]["content_filter_results"] = _filter_results()
            events.append(piece)
        for i, call in enumerate(calls):
            opened = {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": ""},
            }
            events.append(chunk({"tool_calls": [opened]}))
            args = {"index": i, "function": {"arguments": call["arguments"]}}
            events.append(chunk({"tool_calls": [args]}))
        events.append(chunk({}, finish))
        if include_usage:
            last = chunk({})
            last.update(choices=[], usage=usage)
            events.append(last)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def embeddings(self, request: web.Request) -> web.Response:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        raw = body["input"]
        items = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
        dimensions = int(body.get("dimensions") or 8)
        data = []
        for i, item in enumerate(items):
            vector = fake_embedding(item, dimensions)
            packed = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
            embedding = packed if body.get("encoding_format") == "base64" else vector
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        used = sum(len(i.split()) if isinstance(i, str) else len(i) for i in items)
        return web.json_response(
            {
                "object": "list",
                "model": self.deployments[request.match_info["deployment"]],
                "data": data,
                "usage": {"prompt_tokens": used, "total_tokens": used},
            }
        )

    async def images(self, request: web.Request) -> web.Response:
        body, failure = await self._gate(request)
        if failure is not None:
            return failure
        as_url = body.get("response_format", "url") == "url"
        data = []
        for i in range(int(body.get("n") or 1)):
            name = hashlib.sha256(f"{body['prompt']}|{i}".encode()).hexdigest()[:16]
            image: dict[str, Any] = {
                "revised_prompt": "fake",
                "content_filter_results": _filter_results(),
                "prompt_filter_results": _prompt_filter_results()[0]["content_filter_results"],
            }
            if as_url:
                image["url"] = f"{self.url}/files/{name}.png"
            else:
                image["b64_json"] = base64.b64encode(png_bytes(name)).decode()
            data.append(image)
        return web.json_response({"created": int(time.time()), "data": data})

    async def image_file(self, request: web.Request) -> web.Response:
        return web.Response(body=png_bytes(request.match_info["name"]), content_type="image/png")
