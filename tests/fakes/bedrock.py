"""A fake AWS Bedrock: the Runtime's Converse, ConverseStream and InvokeModel (Titan Text
Embeddings V2) and the control plane's ListFoundationModels and ListInferenceProfiles, on one
port of 127.0.0.1.

Built from botocore's own service models (``bedrock-runtime`` 2023-09-30, ``bedrock``
2023-04-20): request bodies are checked against the operation's input shape (unknown members,
missing required ones, enums, base64 blobs: a ``ValidationException`` as Bedrock answers),
errors carry the status the model gives each exception, with ``x-amzn-errortype`` and a
``{"message"}`` body. Every request must be signed: SigV4 is recomputed with botocore from
:data:`SECRET_KEY` (and :data:`SESSION_TOKEN` for :data:`TEMP_KEY_ID`) over the request as it
arrived (raw path, query, signed headers, body) — a mismatch is a 403
``InvalidSignatureException`` — or carry :data:`API_KEY` as a bearer token. Streams are event-
stream frames built by :func:`encode_message` (prelude, headers, payload, CRCs as botocore's
``EventStreamBuffer`` checks them), each payload padded with a ``"p"`` member as Bedrock pads.

Answers are deterministic like :class:`tests.fakes.vendors.FakeVendor`: ``"Echo: <last user
text>"`` (after a tool result: ``"Echo: <its text>"``), one output token per word and one input
token per word of the prompt (system included; 85 per image). With ``toolConfig`` (and a last
turn that is not a tool result) it calls the first two tools with ``{"city": "Paris"}``; with
``outputConfig`` it answers ``{"ok": true}``. Steering: ``fail_statuses`` (an HTTP status, or an
exception name, answered before behaving: one per request), ``fail_message``, ``stream_fail``
(a stream exception event sent after the role event), ``guardrail`` (a guardrail-intervened
answer), ``cache_read_tokens`` / ``cache_write_tokens`` (reported beside ``inputTokens``).
``requests`` keeps each request: its operation, decoded model id, raw path, auth kind, body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import math
import re
import struct
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import botocore.session
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.model import ServiceModel, Shape

from tests.fakes.server import ThreadedServer

ACCESS_KEY_ID = "AKIAFAKEBEDROCK00001"
TEMP_KEY_ID = "ASIAFAKEBEDROCK00002"
SECRET_KEY = "fake/Bedrock+Secret0123456789abcdefghij"
SESSION_TOKEN = "FwoGZXIvYXdzEFakeSessionToken=="
API_KEY = "ABSKZmFrZS1iZWRyb2NrLWFwaS1rZXk="
REGION = "us-east-1"
GUARDRAIL_TEXT = "Sorry, the model cannot answer this question."
EVENT_STREAM = "application/vnd.amazon.eventstream"
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_SESSION = botocore.session.get_session()
RUNTIME_MODEL: ServiceModel = _SESSION.get_service_model("bedrock-runtime")
CONTROL_MODEL: ServiceModel = _SESSION.get_service_model("bedrock")
# Exceptions Bedrock's front door answers that the service model does not list.
_UNMODELED_STATUS = {
    "InvalidSignatureException": 403,
    "UnrecognizedClientException": 403,
    "ExpiredTokenException": 403,
}
# The exception a bare status in ``fail_statuses`` stands for.
_EXCEPTION_FOR_STATUS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


# --- event stream ------------------------------------------------------------------------------
def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        struct.pack("!B", len(raw_name))
        + raw_name
        + struct.pack("!BH", 7, len(raw_value))  # type 7: a UTF-8 string
        + raw_value
    )


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total and headers lengths, CRC32 of both), string
    headers, payload, CRC32 of everything before it."""
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(raw_headers))
    prelude += struct.pack("!I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + raw_headers + payload
    return message + struct.pack("!I", zlib.crc32(message) & 0xFFFFFFFF)


def event_message(event_type: str, data: dict[str, Any]) -> bytes:
    """A ConverseStream event, its payload padded with ``"p"`` as Bedrock pads its events."""
    padded = {**data, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[: 4 + len(event_type)]}
    headers = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, json.dumps(padded).encode())


def exception_message(exception_type: str, message: str) -> bytes:
    """A stream exception event (``throttlingException`` …) as Bedrock sends one mid-stream."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


# --- request checks ----------------------------------------------------------------------------
class InvalidRequest(Exception):
    """The body breaks the operation's input shape (Bedrock: ``ValidationException``)."""


def check_shape(shape: Shape, value: Any, where: str) -> None:
    """Raise :class:`InvalidRequest` when ``value`` is not what ``shape`` allows in JSON."""
    kind = shape.type_name
    if kind == "structure":
        if shape.metadata.get("document"):
            return
        if not isinstance(value, dict):
            raise InvalidRequest(f"{where}: expected an object")
        members = shape.members
        for name, item in value.items():
            if name not in members:
                raise InvalidRequest(f"extraneous key [{name}] is not permitted at {where}")
            check_shape(members[name], item, f"{where}.{name}")
        for name in shape.required_members:
            if name not in value and members[name].serialization.get("location") is None:
                raise InvalidRequest(f"{where}.{name}: a required member is missing")
        if shape.metadata.get("union") and len(value) != 1:
            raise InvalidRequest(f"{where}: exactly one member of a union must be set")
    elif kind == "list":
        if not isinstance(value, list):
            raise InvalidRequest(f"{where}: expected a list")
        if len(value) < shape.metadata.get("min", 0):
            raise InvalidRequest(f"{where}: too few items")
        for i, item in enumerate(value):
            check_shape(shape.member, item, f"{where}[{i}]")
    elif kind == "string":
        if not isinstance(value, str) or len(value) < shape.metadata.get("min", 0):
            raise InvalidRequest(f"{where}: expected a non-empty string")
        if shape.enum and value not in shape.enum:
            raise InvalidRequest(f"{where}: {value!r} is not one of {shape.enum}")
    elif kind == "blob":
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise InvalidRequest(f"{where}: not base64") from None
    elif kind in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidRequest(f"{where}: expected an integer")
        if value < shape.metadata.get("min", -math.inf):
            raise InvalidRequest(f"{where}: below its minimum")
    elif kind in ("float", "double"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise InvalidRequest(f"{where}: expected a number")
    elif kind == "boolean" and not isinstance(value, bool):
        raise InvalidRequest(f"{where}: expected a boolean")


def _check_conversation(messages: list[dict[str, Any]]) -> None:
    """Converse's own rules beyond the shape: the first turn is the user's, roles alternate."""
    roles = [m["role"] for m in messages]
    if not roles or roles[0] != "user":
        raise InvalidRequest("A conversation must start with a user message.")
    if any(a == b for a, b in itertools.pairwise(roles)):
        raise InvalidRequest("A conversation must alternate between user and assistant roles.")


def _words(blocks: list[dict[str, Any]]) -> int:
    total = 0
    for block in blocks:
        total += len(str(block.get("text", "")).split())
        total += 85 if "image" in block else 0
        for item in (block.get("toolResult") or {}).get("content") or []:
            total += len(str(item.get("text", "")).split())
    return total


def _reply(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    last = body["messages"][-1]["content"]
    results = [b["toolResult"] for b in last if "toolResult" in b]
    if results:
        return "Echo: " + " ".join(c.get("text", "") for c in results[-1]["content"]), []
    tools = (body.get("toolConfig") or {}).get("tools") or []
    if tools:
        calls = [
            {
                "toolUseId": f"tooluse_fake{i}",
                "name": t["toolSpec"]["name"],
                "input": {"city": "Paris"},
            }
            for i, t in enumerate(tools[:2])
        ]
        return "", calls
    if body.get("outputConfig"):
        return '{"ok": true}', []
    text = " ".join(str(b["text"]) for b in last if "text" in b)
    return "Echo: " + text, []


@dataclass
class FakeBedrock(ThreadedServer):
    """One fake Bedrock (runtime and control plane); ``url`` is its base URL (no ``/v1``)."""

    region: str = REGION
    foundation_models: list[str] = field(
        default_factory=lambda: [
            "anthropic.claude-3-5-sonnet-20241022-v2:0",
            "amazon.titan-embed-text-v2:0",
        ]
    )
    inference_profiles: list[str] = field(
        default_factory=lambda: [
            "us.anthropic.claude-3-5-sonnet-20241022-v2:0",
            "us.meta.llama3-3-70b-instruct-v1:0",
        ]
    )
    profiles_page_size: int = 1
    fail_statuses: list[int | str] = field(default_factory=list)
    fail_message: str = ""
    stream_fail: str = ""
    guardrail: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.serve_on_free_port("fake-bedrock")
        self.url = f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Forget requests and behaviours (between tests)."""
        self.fail_statuses = []
        self.fail_message = ""
        self.stream_fail = ""
        self.guardrail = False
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        self.requests = []

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/model/{rest:.+}", self.runtime)
        router.add_get("/foundation-models", self.list_foundation_models)
        router.add_get("/inference-profiles", self.list_inference_profiles)

    # --- auth -----------------------------------------------------------------------------
    def _auth_kind(self, request: web.Request, body: bytes) -> str | None:
        """``"sigv4"`` or ``"bearer"`` when the request is authenticated, else ``None``."""
        authorization = request.headers.get("authorization", "")
        if authorization.startswith("Bearer "):
            return "bearer" if hmac.compare_digest(authorization[7:], API_KEY) else None
        match = _AUTH.match(authorization)
        if match is None or match["region"] != self.region or match["service"] != "bedrock":
            return None
        secrets = {ACCESS_KEY_ID: (SECRET_KEY, None), TEMP_KEY_ID: (SECRET_KEY, SESSION_TOKEN)}
        if match["key"] not in secrets:
            return None
        secret, token = secrets[match["key"]]
        signed = match["signed"].split(";")
        if "host" not in signed or "x-amz-date" not in signed:
            return None
        if token is not None and request.headers.get("x-amz-security-token") != token:
            return None
        headers = {name: request.headers.get(name, "") for name in signed}
        url = f"http://{request.headers.get('host', '')}{request.raw_path}"
        aws = AWSRequest(method=request.method, url=url, data=body, headers=headers)
        aws.context["timestamp"] = request.headers.get("x-amz-date", "")
        if aws.context["timestamp"][:8] != match["date"]:
            return None
        signer = SigV4Auth(Credentials(match["key"], secret, token), "bedrock", self.region)
        canonical = signer.canonical_request(aws)
        expected = signer.signature(signer.string_to_sign(aws, canonical), aws)
        return "sigv4" if hmac.compare_digest(expected, match["signature"]) else None

    # --- answers --------------------------------------------------------------------------
    def _error(self, name: str, message: str) -> web.Response:
        status = _UNMODELED_STATUS.get(name)
        if status is None:
            status = RUNTIME_MODEL.shape_for(name).metadata["error"]["httpStatusCode"]
        return web.json_response(
            {"message": message},
            status=status,
            headers={
                "x-amzn-errortype": f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/",
                "x-amzn-requestid": str(uuid.uuid4()),
            },
        )

    def _failure(self) -> web.Response | None:
        if not self.fail_statuses:
            return None
        wanted = self.fail_statuses.pop(0)
        name = _EXCEPTION_FOR_STATUS[wanted] if isinstance(wanted, int) else wanted
        return self._error(name, self.fail_message or f"fake failure ({name})")

    async def _gate(self, request: web.Request) -> tuple[bytes, str | web.Response]:
        """The body and the auth kind, or the error response to answer instead."""
        body = await request.read()
        kind = self._auth_kind(request, body)
        if kind is None:
            message = (
                "The request signature we calculated does not match the signature you provided."
            )
            return body, self._error("InvalidSignatureException", message)
        return body, kind

    async def runtime(self, request: web.Request) -> web.StreamResponse:
        raw, gate = await self._gate(request)
        if isinstance(gate, web.Response):
            return gate
        parts = request.raw_path.split("?")[0].split("/")  # ['', 'model', '<id>', '<op>']
        operations = {
            "converse": "Converse",
            "converse-stream": "ConverseStream",
            "invoke": "InvokeModel",
        }
        if len(parts) != 4 or parts[3] not in operations:
            return self._error("ResourceNotFoundException", "Unknown operation.")
        model_id, operation = unquote(parts[2]), operations[parts[3]]
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error("ValidationException", "Malformed input request.")
        self.requests.append(
            {
                "operation": operation,
                "model": model_id,
                "path": request.raw_path,
                "auth": gate,
                "body": body,
            }
        )
        failure = self._failure()
        if failure is not None:
            return failure
        if operation == "InvokeModel":
            return self._embed(model_id, body)
        try:
            check_shape(RUNTIME_MODEL.operation_model(operation).input_shape, body, "request")
            _check_conversation(body["messages"])
        except InvalidRequest as exc:
            return self._error("ValidationException", str(exc))
        text, calls = _reply(body)
        if self.guardrail:
            text, calls = GUARDRAIL_TEXT, []
        words = text.split(" ") if text else []
        prompt = sum(_words(m["content"]) for m in body["messages"]) + _words(
            body.get("system") or []
        )
        usage = {
            "inputTokens": prompt,
            "outputTokens": len(words) + len(calls),
            "totalTokens": prompt
            + len(words)
            + len(calls)
            + self.cache_read_tokens
            + self.cache_write_tokens,
        }
        if self.cache_read_tokens or self.cache_write_tokens:
            usage["cacheReadInputTokens"] = self.cache_read_tokens
            usage["cacheWriteInputTokens"] = self.cache_write_tokens
        stop = "guardrail_intervened" if self.guardrail else ("tool_use" if calls else "end_turn")
        if operation == "Converse":
            content: list[dict[str, Any]] = [{"text": text}] if text else []
            content += [{"toolUse": call} for call in calls]
            return web.json_response(
                {
                    "output": {"message": {"role": "assistant", "content": content}},
                    "stopReason": stop,
                    "usage": usage,
                    "metrics": {"latencyMs": 12},
                },
                headers={"x-amzn-requestid": str(uuid.uuid4())},
            )
        return await self._stream(request, words, calls, stop, usage)

    async def _stream(
        self,
        request: web.Request,
        words: list[str],
        calls: list[dict[str, Any]],
        stop: str,
        usage: dict[str, Any],
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": EVENT_STREAM})
        await response.prepare(request)
        await response.write(event_message("messageStart", {"role": "assistant"}))
        if self.stream_fail:
            await response.write(exception_message(self.stream_fail, "fake stream failure"))
            await response.write_eof()
            return response
        index = 0
        if words:
            for i, word in enumerate(words):
                delta = {"text": word if i == 0 else " " + word}
                await response.write(
                    event_message("contentBlockDelta", {"contentBlockIndex": 0, "delta": delta})
                )
            await response.write(event_message("contentBlockStop", {"contentBlockIndex": 0}))
            index = 1
        for call in calls:
            start = {"toolUse": {"toolUseId": call["toolUseId"], "name": call["name"]}}
            await response.write(
                event_message("contentBlockStart", {"contentBlockIndex": index, "start": start})
            )
            arguments = json.dumps(call["input"])
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                delta = {"toolUse": {"input": piece}}
                await response.write(
                    event_message("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                )
            await response.write(event_message("contentBlockStop", {"contentBlockIndex": index}))
            index += 1
        await response.write(event_message("messageStop", {"stopReason": stop}))
        await response.write(
            event_message("metadata", {"usage": usage, "metrics": {"latencyMs": 12}})
        )
        await response.write_eof()
        return response

    def _embed(self, model_id: str, body: dict[str, Any]) -> web.Response:
        if "titan-embed" not in model_id:
            return self._error("ValidationException", "This model does not take this input.")
        allowed = {"inputText", "dimensions", "normalize", "embeddingTypes"}
        if set(body) - allowed or not isinstance(body.get("inputText"), str):
            return self._error("ValidationException", "Malformed input request.")
        dimensions = int(body.get("dimensions") or 1024)
        if dimensions not in (256, 512, 1024):
            return self._error("ValidationException", "dimensions must be 256, 512 or 1024.")
        digest = hashlib.sha256(body["inputText"].encode()).digest()
        raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dimensions)]
        norm = math.sqrt(sum(v * v for v in raw)) or 1.0
        return web.json_response(
            {
                "embedding": [v / norm for v in raw],
                "inputTextTokenCount": len(body["inputText"].split()),
            }
        )

    # --- control plane --------------------------------------------------------------------
    async def list_foundation_models(self, request: web.Request) -> web.Response:
        _raw, gate = await self._gate(request)
        if isinstance(gate, web.Response):
            return gate
        self.requests.append({"operation": "ListFoundationModels", "auth": gate})
        summaries = [
            {
                "modelArn": f"arn:aws:bedrock:{self.region}::foundation-model/{model}",
                "modelId": model,
                "modelName": model,
                "providerName": model.split(".")[0].title(),
                "inputModalities": ["TEXT"],
                "outputModalities": ["EMBEDDING" if "embed" in model else "TEXT"],
                "responseStreamingSupported": "embed" not in model,
                "customizationsSupported": [],
                "inferenceTypesSupported": ["ON_DEMAND"],
                "modelLifecycle": {"status": "ACTIVE"},
            }
            for model in self.foundation_models
        ]
        return web.json_response({"modelSummaries": summaries})

    async def list_inference_profiles(self, request: web.Request) -> web.Response:
        _raw, gate = await self._gate(request)
        if isinstance(gate, web.Response):
            return gate
        self.requests.append({"operation": "ListInferenceProfiles", "auth": gate})
        start = int(request.query.get("nextToken") or 0)
        size = min(int(request.query.get("maxResults") or 1000), self.profiles_page_size)
        page = self.inference_profiles[start : start + size]
        summaries = [
            {
                "inferenceProfileName": f"US {profile}",
                "inferenceProfileArn": (
                    f"arn:aws:bedrock:{self.region}:123456789012:inference-profile/{profile}"
                ),
                "inferenceProfileId": profile,
                "models": [
                    {"modelArn": f"arn:aws:bedrock:{self.region}::foundation-model/{profile[3:]}"}
                ],
                "status": "ACTIVE",
                "type": "SYSTEM_DEFINED",
                "createdAt": "2024-10-22T00:00:00Z",
                "updatedAt": "2024-10-22T00:00:00Z",
            }
            for profile in page
        ]
        out: dict[str, Any] = {"inferenceProfileSummaries": summaries}
        if start + size < len(self.inference_profiles):
            out["nextToken"] = str(start + size)
        return web.json_response(out)
