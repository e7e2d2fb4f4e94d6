"""A fake vLLM node: a real HTTP server on 127.0.0.1 answering as vLLM's OpenAI server does.

Modelled on vLLM 0.10's ``vllm/entrypoints/openai`` (``protocol.py``, ``serving_chat.py``,
``api_server.py``), the version whose errors are ``{"error": {...}}``:

- ``GET /v1/models``: ``owned_by: "vllm"``, ``root``, ``parent``, ``max_model_len`` and a
  ``permission`` list on each model card; ``GET /health`` (empty 200), ``GET /version``.
- ``POST /v1/chat/completions``: extra fields are accepted and ignored (vLLM only logs them);
  its sampling extras ``top_k``, ``min_p``, ``repetition_penalty`` are range-checked as
  ``SamplingParams`` does; guided decoding (``guided_json``, ``guided_regex``, ``guided_choice``,
  ``guided_grammar``, ``structural_tag``, or ``response_format`` json_object / json_schema) shapes
  the reply; more than one of json/regex/choice is a 400. ``stream_options`` without ``stream``
  is a 400 (a request validation error). A prompt plus ``max_tokens`` beyond ``max_model_len``
  is vLLM's 400 "maximum context length". An unknown model is a 404 ``NotFoundError``.
- Non-streamed answers carry vLLM's extra fields (``stop_reason``, ``reasoning_content``,
  ``prompt_logprobs``, ``kv_transfer_params``; ``tool_calls: []``). Streams send a role chunk, one
  chunk per word, a finish chunk with ``stop_reason``, and a usage chunk (``choices: []``) **only**
  when ``stream_options.include_usage`` is true (``continuous_usage_stats`` adds usage to every
  chunk); chunks otherwise have no ``usage`` key. A failure inside a stream is sent as
  ``data: {"error": {...}}`` followed by ``data: [DONE]``.
- Errors: ``{"error": {"message", "type", "param", "code"}}`` where ``type`` is vLLM's
  (``BadRequestError``, ``NotFoundError``, ``Bad Request`` for validation errors) and ``code`` the
  HTTP status as an integer. ``legacy_errors = True`` answers the flat shape of vLLM ≤ 0.9
  (``{"object": "error", "message", "type", "param", "code"}``).

Deterministic: the reply is ``"Echo: <last user text>"``; one token per word of every message
(plus 3 per message of chat template) and of the reply. Tests steer it with ``fault``
(``"stream_error"``: fail after the first content chunk; ``"500"``: answer 500) and read the
bodies it received in ``requests``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import ThreadedServer

VLLM_VERSION = "0.10.1"
TEMPLATE_TOKENS_PER_MESSAGE = 3
DEFAULT_MAX_TOKENS = 16  # a small cap so unbounded requests stay short here


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """The fake's token count of a prompt (words plus the template's per-message overhead)."""
    return sum(
        len(_text_of(m.get("content")).split()) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages
    )


class VLLMError(Exception):
    """An error vLLM answers with ``status``; ``type`` as vLLM names it."""

    def __init__(self, status: int, message: str, type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type


@dataclass
class FakeVLLM(ThreadedServer):
    """One fake vLLM OpenAI server serving ``served_model`` (``--served-model-name``)."""

    served_model: str = "meta-llama/Llama-3.1-8B-Instruct"
    max_model_len: int = 8192
    legacy_errors: bool = False
    fault: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.created = int(time.time())
        self.serve_on_free_port("fake-vllm")

    # --- lifecycle ------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget requests and behaviours (between tests)."""
        self.legacy_errors = False
        self.fault = ""
        self.requests = []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/health", self.health)
        router.add_get("/version", self.version)
        router.add_get("/v1/models", self.list_models)
        router.add_post("/v1/chat/completions", self.chat)

    # --- errors ---------------------------------------------------------------------------
    def error_body(self, error: VLLMError) -> dict[str, Any]:
        """vLLM's error body (``ErrorResponse``), nested or, with ``legacy_errors``, flat."""
        info = {"message": error.message, "type": error.type, "param": None, "code": error.status}
        return {"object": "error", **info} if self.legacy_errors else {"error": info}

    def error_response(self, error: VLLMError) -> web.Response:
        return web.json_response(self.error_body(error), status=error.status)

    # --- routes ---------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VLLM_VERSION})

    async def list_models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.served_model,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.served_model,
            "parent": None,
            "max_model_len": self.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": self.created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        try:
            if self.fault == "500":
                raise VLLMError(500, "fake engine failure", "InternalServerError")
            self.validate(body)
            max_tokens = self.check_context(body)
        except VLLMError as error:
            return self.error_response(error)
        words = self.reply(body).split(" ")[:max_tokens]
        if body.get("stream"):
            return await self.stream(request, body, words)
        return web.json_response(self.completion(body, words))

    # --- request handling -----------------------------------------------------------------
    def validate(self, body: dict[str, Any]) -> None:
        """The checks of ``ChatCompletionRequest``'s validators and ``SamplingParams``."""
        if body.get("model") not in (None, self.served_model):
            raise VLLMError(404, f"The model `{body['model']}` does not exist.", "NotFoundError")
        if not isinstance(body.get("messages"), list):
            raise VLLMError(
                400,
                "1 validation error for ChatCompletionRequest\nmessages\n  Field required",
                "Bad Request",
            )
        if body.get("stream_options") and not body.get("stream"):
            raise VLLMError(
                400,
                "1 validation error for ChatCompletionRequest\n  Value error, Stream options can "
                "only be defined when `stream=True`.",
                "Bad Request",
            )
        guides = [k for k in ("guided_json", "guided_regex", "guided_choice") if body.get(k)]
        if len(guides) > 1:
            raise VLLMError(
                400,
                "You can only use one kind of guided decoding "
                "('guided_json', 'guided_regex' or 'guided_choice').",
                "Bad Request",
            )
        top_k = body.get("top_k")
        if top_k is not None and (not isinstance(top_k, int) or top_k < -1):
            raise VLLMError(400, f"top_k must be 0 (disable), or at least 1, got {top_k}.")
        min_p = body.get("min_p")
        if min_p is not None and not 0.0 <= float(min_p) <= 1.0:
            raise VLLMError(400, f"min_p must be in [0, 1], got {min_p}.")
        penalty = body.get("repetition_penalty")
        if penalty is not None and float(penalty) <= 0.0:
            raise VLLMError(400, f"repetition_penalty must be greater than zero, got {penalty}.")

    def check_context(self, body: dict[str, Any]) -> int:
        """The completion's token cap; vLLM's 400 when prompt + cap exceed ``max_model_len``."""
        prompt = prompt_tokens(body["messages"])
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if requested is not None and prompt + int(requested) > self.max_model_len:
            raise VLLMError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {prompt + int(requested)} tokens ({prompt} in the messages, "
                f"{requested} in the completion). Please reduce the length of the messages or "
                "completion.",
            )
        if prompt >= self.max_model_len:
            raise VLLMError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your request has {prompt} input tokens. Please reduce the length of the input "
                "messages.",
            )
        return int(requested) if requested is not None else DEFAULT_MAX_TOKENS

    def reply(self, body: dict[str, Any]) -> str:
        """What the model says: guided decoding decides the shape, else an echo."""
        fmt = body.get("response_format") or {}
        if body.get("guided_choice"):
            return str(body["guided_choice"][0])
        if body.get("guided_json") or fmt.get("type") in ("json_object", "json_schema"):
            return '{"ok": true}'
        if body.get("guided_regex") or body.get("guided_grammar") or body.get("structural_tag"):
            return "guided"
        for message in reversed(body["messages"]):
            if message.get("role") == "user":
                return "Echo: " + _text_of(message.get("content"))
        return "Echo:"

    @staticmethod
    def usage(prompt: int, completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        }

    def completion(self, body: dict[str, Any], words: list[str]) -> dict[str, Any]:
        """vLLM's ``ChatCompletionResponse``."""
        prompt = prompt_tokens(body["messages"])
        finish = "length" if len(words) < len(self.reply(body).split(" ")) else "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.served_model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "reasoning_content": None,
                        "content": " ".join(words),
                        "tool_calls": [],
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "usage": self.usage(prompt, len(words)),
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }

    async def stream(
        self, request: web.Request, body: dict[str, Any], words: list[str]
    ) -> web.StreamResponse:
        """vLLM's SSE: chunks serialised with ``exclude_unset`` (no ``usage`` unless asked)."""
        response = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        continuous = include_usage and bool(options.get("continuous_usage_stats"))
        prompt = prompt_tokens(body["messages"])
        chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        async def send(choices: list[dict[str, Any]], completion: int) -> None:
            chunk: dict[str, Any] = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.served_model,
                "choices": choices,
            }
            if continuous:
                chunk["usage"] = self.usage(prompt, completion)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        role = {"role": "assistant", "content": ""}
        await send([{"index": 0, "delta": role, "logprobs": None, "finish_reason": None}], 0)
        for n, word in enumerate(words, start=1):
            text = word if n == 1 else " " + word
            delta = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": None,
            }
            await send([delta], n)
            if self.fault == "stream_error":
                error = VLLMError(500, "fake engine died mid-stream", "InternalServerError")
                await response.write(f"data: {json.dumps(self.error_body(error))}\n\n".encode())
                await response.write(b"data: [DONE]\n\n")
                return response
        finish = "length" if len(words) < len(self.reply(body).split(" ")) else "stop"
        last = {
            "index": 0,
            "delta": {"content": ""},
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        await send([last], len(words))
        if include_usage:
            usage_chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.served_model,
                "choices": [],
                "usage": self.usage(prompt, len(words)),
            }
            await response.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response
