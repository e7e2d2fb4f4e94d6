"""The ``/v1`` HTTP layer: one lean Channels consumer, a route table, and response types.

``/v1`` bypasses Django's middleware stack (sessions, CSRF, auth …: none of it is needed for a
Bearer-key JSON API) — :mod:`config.asgi` sends ``/v1`` straight to :class:`V1Consumer`.
What the consumer does for every call:

1. reads the body, refusing more than the route's limit (``INFRAI_MAX_BODY_BYTES`` unless the
   route names another setting, e.g. uploads) with 413 as soon as it knows;
2. finds the route (404 unknown path, 405 wrong method), authenticates when the route needs it;
3. runs the handler **in its own task**, so a client disconnect (``http.disconnect``) cancels it
   — a handler's ``finally`` blocks (settlement) run on every exit path;
4. renders :class:`~config.errors.ApiError` in the OpenAI shape; any other exception is a 500
   with a generic message (details go to the log, never to the caller).

Every response carries ``X-Infrai-Request-Id``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from django.conf import settings

from accounts.auth import KeyContext, authenticate
from config.errors import (
    ApiError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
)

log = logging.getLogger(__name__)

JSON_CT = b"application/json"


def new_request_id() -> str:
    """A request id as shown to callers: ``req_`` + 24 hex characters."""
    return "req_" + secrets.token_hex(12)


@dataclass
class ApiRequest:
    """One ``/v1`` call as handlers see it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: dict[str, list[str]]
    request_id: str
    started_ns: int
    path_params: dict[str, str] = field(default_factory=dict)
    key: KeyContext | None = None

    @property
    def caller(self) -> KeyContext:
        """The authenticated key (only on routes that require one)."""
        assert self.key is not None, "route does not authenticate"
        return self.key

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 ``invalid_json``."""
        if not self.body:
            raise InvalidRequest(
                "The request body is empty; send a JSON object.", code="invalid_json"
            )
        try:
            data = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(
                f"We could not parse the JSON body of your request: {exc}.", code="invalid_json"
            ) from None
        if not isinstance(data, dict):
            raise InvalidRequest(
                "The JSON body must be an object.", code="invalid_json", param=None
            )
        return data


@dataclass
class Response:
    """A complete response (JSON by default, any bytes with ``content_type``)."""

    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: bytes = JSON_CT


@dataclass
class StreamingResponse:
    """A response whose body is produced by ``chunks`` as it is sent (SSE, audio)."""

    chunks: AsyncIterator[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: bytes = b"text/event-stream"
    # Awaited once the response ends, however it ends (even if ``chunks`` never started).
    on_close: Callable[[], Awaitable[None]] | None = None


def json_response(
    data: dict[str, Any], *, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """Serialize ``data`` compactly into a :class:`Response`."""
    return Response(
        json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode(),
        status=status,
        headers=headers or {},
    )


def error_response(exc: ApiError, headers: dict[str, str] | None = None) -> Response:
    """The OpenAI error shape for ``exc``, with its status and headers."""
    return json_response(
        exc.body(), status=exc.status, headers={**exc.headers(), **(headers or {})}
    )


Handler = Callable[[ApiRequest], Awaitable[Response | StreamingResponse]]


@dataclass(frozen=True)
class Route:
    pattern: re.Pattern[str]
    methods: dict[str, Handler]
    authenticated: bool = True
    body_limit_setting: str = "INFRAI_MAX_BODY_BYTES"

    @property
    def max_body_bytes(self) -> int:
        """The largest body this route accepts, read from settings on every call."""
        return int(getattr(settings, self.body_limit_setting))


_routes: list[Route] = []


def route(
    path: str,
    *,
    methods: dict[str, Handler],
    authenticated: bool = True,
    body_limit_setting: str = "INFRAI_MAX_BODY_BYTES",
) -> None:
    """Register ``path`` (``{name}`` captures one segment; ``{name:path}`` the rest).

    ``body_limit_setting`` names the setting that caps the request body (413 above it): file
    uploads name ``INFRAI_MAX_UPLOAD_BYTES``.
    """
    regex = re.sub(r"\{(\w+):path\}", r"(?P<\1>.+)", path)
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", regex)
    _routes.append(Route(re.compile(f"^{regex}$"), methods, authenticated, body_limit_setting))


def body_limit(path: str) -> int:
    """The body limit of the route matching ``path`` (the default for unknown paths)."""
    for candidate in _routes:
        if candidate.pattern.match(path):
            return candidate.max_body_bytes
    return int(settings.INFRAI_MAX_BODY_BYTES)


def resolve(method: str, path: str) -> tuple[Route, Handler, dict[str, str]]:
    """The route and handler for a call, or 404 / 405."""
    for candidate in _routes:
        match = candidate.pattern.match(path)
        if match:
            handler = candidate.methods.get(method)
            if handler is None:
                allowed = ", ".join(sorted(candidate.methods))
                raise MethodNotAllowed(
                    f"Method {method} is not allowed on {path}; use {allowed}.",
                    code="method_not_allowed",
                )
            return candidate, handler, match.groupdict()
    raise NotFound(f"Unknown request URL: {method} {path}.", code="unknown_url")


def _encode_headers(content_type: bytes, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    out = [(b"content-type", content_type)]
    out.extend((k.lower().encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items())
    return out


class V1Consumer(AsyncHttpConsumer):
    """Serves every ``/v1`` call (see the module docstring)."""

    # No channel layer: a /v1 call never listens on one, and asking a Redis layer for a
    # channel per request would cost a round trip.
    channel_layer_alias = "__none__"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._size = 0
        self._too_large = False
        self._task: asyncio.Task[None] | None = None
        self._limit: int | None = None

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' dispatch closes stale DB connections through a thread hop on every
        # message; /v1 handlers use thread-pooled ORM calls that manage their own.
        handler = getattr(self, message["type"].replace(".", "_"), None)
        if handler is not None:
            await handler(message)

    async def http_request(self, message: dict[str, Any]) -> None:
        if self._too_large or self._task is not None:
            return
        chunk = message.get("body", b"")
        self._size += len(chunk)
        if self._limit is None:
            self._limit = body_limit(self.scope["path"])
        limit = self._limit
        if self._size > limit or self._declared_length() > limit:
            self._too_large = True
            exc = RequestTooLarge(
                f"Request body is larger than the limit of {limit} bytes.", code="request_too_large"
            )
            await self._send(error_response(exc, {"x-infrai-request-id": new_request_id()}))
            return
        self.body.append(chunk)
        if not message.get("more_body"):
            self._task = asyncio.get_running_loop().create_task(self._serve(b"".join(self.body)))

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            # asyncio.wait, not await: a second cancellation must not abort the handler's
            # cleanup (settlement runs in its finally blocks).
            await asyncio.wait([task])
        raise StopConsumer()

    def _declared_length(self) -> int:
        for name, value in self.scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    async def _serve(self, body: bytes) -> None:
        scope = self.scope
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        request = ApiRequest(
            method=scope["method"],
            path=scope["path"],
            headers=headers,
            body=body,
            query=parse_qs(scope.get("query_string", b"").decode("latin-1")),
            request_id=new_request_id(),
            started_ns=time.perf_counter_ns(),
        )
        base_headers = {"x-infrai-request-id": request.request_id}
        try:
            matched, handler, request.path_params = resolve(request.method, request.path)
            if matched.authenticated:
                request.key = await authenticate(headers.get("authorization"))
            response = await handler(request)
        except ApiError as exc:
            response = error_response(exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unhandled error in %s %s", request.method, request.path)
            response = error_response(
                ApiError("The server had an error while processing your request.")
            )
        response.headers = {**base_headers, **response.headers}
        await self._send(response)

    async def _send(self, response: Response | StreamingResponse) -> None:
        await self.send_headers(
            status=response.status, headers=_encode_headers(response.content_type, response.headers)
        )
        if isinstance(response, Response):
            await self.send_body(response.body)
            return
        try:
            async for chunk in response.chunks:
                await self.send_body(chunk, more_body=True)
        finally:
            aclose = getattr(response.chunks, "aclose", None)
            if aclose is not None:
                await aclose()
            if response.on_close is not None:
                await response.on_close()
        await self.send_body(b"")
