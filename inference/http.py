"""The ``/v1`` HTTP layer: one lean ASGI app, a route table, and response types.

``/v1`` bypasses Django's middleware stack (sessions, CSRF, auth …: none of it is needed for a
Bearer-key JSON API) — :mod:`config.asgi` builds one :class:`V1App` from the route tables the
endpoints declare (:func:`route` makes a :class:`Route`; nothing registers itself on import)
and sends ``/v1`` straight to it. What it does for every call:

1. **before reading any of the body**: refuses a declared ``Content-Length`` over the route's
   limit (``INFRAI_MAX_BODY_BYTES`` unless the route names another setting, e.g. uploads) with
   413 and ``connection: close``; finds the route (404 unknown path, 405 wrong method);
   refuses a query value PostgreSQL cannot take (a NUL, invalid Unicode: 400 naming the
   parameter, :mod:`infra.querystring`);
   authenticates when the route needs it (``Authorization: Bearer``, or ``x-api-key`` as
   Anthropic's SDKs send it; a metered route whose handler counts the call
   before doing anything for it — ``confirms_key`` — takes the key's remembered context and
   confirms it in the rate-limit round trip: :mod:`accounts.auth`); runs the route's
   ``before_body`` check (uploads count the rate limit and check the wallet here). A refusal
   costs no body bytes: the server (uvicorn) hands the body to the app only as the app asks
   for it;
2. reads the body, counting bytes as they arrive (a chunked body has no declared length), and
   refuses with 413 + ``connection: close`` the moment the count passes the limit;
3. runs the handler **in its own task**, so a client disconnect (``http.disconnect``) cancels it
   — a handler's ``finally`` blocks (settlement) run on every exit path;
4. renders :class:`~config.errors.ApiError` in the OpenAI shape (or the route's own dialect's,
   ``render_error``), and a refusal of billing or
   the catalog as :func:`inference.errors.api_error` maps it (the one table); any other
   exception is a 500 with a generic message (details go to the log, never to the caller).

Every response carries ``X-Infrai-Request-Id`` and the same value as ``x-request-id`` (the
header the OpenAI SDKs expose as ``.request_id``), and ``X-Content-Type-Options: nosniff``.

Why not Starlette's routing and request handling (measured by ``bench/http_layer.py`` in
``make bench``, 2026-12-04, 3 interleaved passes each on the 2-core machine): per non-streamed
call the two cost the same within noise (Starlette ÷ ours 0.94–1.05× of gateway CPU), but a
200-chunk stream costs 1.15× on Starlette (6.33 against 5.50 ms, ~4 µs more per chunk, against
the relay's budget of 20 µs per chunk), and steps 1–3 above would be our own code on Starlette
too (docs/performance.md, "Our HTTP layer against Starlette's").
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote

from django.conf import settings

from accounts.auth import KeyContext, authenticate
from config.errors import (
    ApiError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
    internal_error,
)
from inference import request_ids
from inference.errors import api_error
from infra import jsonio, outages
from infra.querystring import query_value_error, unstorable_param

log = logging.getLogger(__name__)
FLOOR_KEY = "infrai.floor"  # the scope state's entry for the server's Floor (inference.floor)

JSON_CT = b"application/json"
# Deepest nesting of arrays/objects a JSON body may have (400 ``invalid_json`` deeper).
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS_ONLY = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _nested(levels: int) -> re.Pattern[bytes]:
    """A regex matching one balanced ``(…)`` group nested at most ``levels`` deep.

    Possessive repeats (``*+``): the structure is unambiguous, so the match never backtracks.
    """
    pattern = rb"\(\)"
    for _ in range(levels - 1):
        pattern = rb"\((?:" + pattern + rb")*+\)"
    return re.compile(pattern)


_WITHIN_DEPTH = _nested(MAX_JSON_DEPTH)


def json_too_deep(body: bytes) -> bool:
    """Whether the arrays/objects of the JSON text ``body`` nest deeper than MAX_JSON_DEPTH.

    No recursion and no Python loop per byte (~0.1 s for a 4 MB adversarial body): strings are
    dropped, brackets mapped to ``(``/``)`` and everything else deleted, then one regex checks
    that the brackets form a group at most MAX_JSON_DEPTH deep. Unbalanced brackets return
    ``False``: the JSON parser reports those (deep unbalanced text raises RecursionError there).
    """
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return False
    # Without a backslash before a quote every quote delimits a string: splitting on them is
    # several times faster than the regex (which handles escaped quotes).
    escaped = b'\\"' in body
    unquoted = _JSON_STRING.sub(b"", body) if escaped else b"".join(body.split(b'"')[::2])
    brackets = unquoted.translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    if _WITHIN_DEPTH.fullmatch(brackets):
        return False
    return brackets.count(b"(") == brackets.count(b")")


def new_request_id() -> str:
    """A request id as shown to callers: ``req_`` + 24 hex characters, the first 12 its
    creation time (:mod:`inference.request_ids`: the request log's partition key)."""
    return request_ids.new()


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
    # The key's context is known current (read from the shared cache or the database by this
    # call); a remembered one is confirmed by inference.stages.admit before anything is served.
    key_confirmed: bool = False
    logged: bool = False  # the call has (or is writing) its request-log row
    requested_model: str = ""  # the model the body asked for, once a handler read it
    # What a route's ``before_body`` check hands to its handler (e.g. the counted call).
    state: dict[str, Any] = field(default_factory=dict)
    # The server's :class:`inference.floor.Floor` (the calls it carries), from the ASGI scope.
    floor: Any = None

    @property
    def caller(self) -> KeyContext:
        """The authenticated key (only on routes that require one)."""
        assert self.key is not None, "route does not authenticate"
        return self.key

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 ``invalid_json`` (also for nesting deeper than
        :data:`MAX_JSON_DEPTH`, checked before parsing)."""
        if not self.body:
            raise InvalidRequest(
                "The request body is empty; send a JSON object.", code="invalid_json"
            )
        if json_too_deep(self.body):
            raise _too_deep()
        try:
            data = jsonio.loads(self.body)  # the standard library's errors and results
        except RecursionError:
            raise _too_deep() from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(
                f"We could not parse the JSON body of your request: {exc}.", code="invalid_json"
            ) from None
        if not isinstance(data, dict):
            raise InvalidRequest(
                "The JSON body must be an object.", code="invalid_json", param=None
            )
        if (b"\\ud" in self.body or b"\\uD" in self.body) and _has_lone_surrogate(data):
            raise InvalidRequest(
                "The JSON body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff "
                "without its pair), which is not valid Unicode.",
                code="invalid_json",
            )
        return data


def _has_lone_surrogate(data: Any) -> bool:
    """Whether a parsed JSON value holds a string that cannot be encoded as UTF-8 (only
    called when the body has a ``\\ud…`` escape, so normal requests never pay for it)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _too_deep() -> InvalidRequest:
    return InvalidRequest(
        f"The JSON body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels.",
        code="invalid_json",
    )


def too_large(limit: int) -> RequestTooLarge:
    """The 413 for a body over ``limit`` bytes."""
    return RequestTooLarge(
        f"Request body is larger than the limit of {limit} bytes.", code="request_too_large"
    )


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
        jsonio.dumps(data),  # a vendor string that is not valid Unicode never makes a 500
        status=status,
        headers=headers or {},
    )


def error_response(exc: ApiError, headers: dict[str, str] | None = None) -> Response:
    """The OpenAI error shape for ``exc``, with its status and headers."""
    return json_response(
        exc.body(), status=exc.status, headers={**exc.headers(), **(headers or {})}
    )


def credentials(headers: dict[str, str]) -> str | None:
    """The ``Authorization`` header of a call, or — without one — its ``x-api-key`` (how
    Anthropic's SDKs send a key) as ``Bearer <key>``."""
    authorization = headers.get("authorization")
    if authorization is None and (api_key := headers.get("x-api-key")):
        return f"Bearer {api_key}"
    return authorization


Handler = Callable[[ApiRequest], Awaitable[Response | StreamingResponse]]
# Renders a refusal on a route as its dialect shapes errors (OpenAI's: :func:`error_response`).
ErrorRenderer = Callable[[ApiError], Response]
# Runs after authentication and before any byte of the body is read; raises ApiError to refuse.
BeforeBody = Callable[[ApiRequest], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    path: str  # as declared: ``{name}`` one segment, ``{name:path}`` the rest
    pattern: re.Pattern[str]
    methods: dict[str, Handler]
    authenticated: bool = True
    body_limit_setting: str = "INFRAI_MAX_BODY_BYTES"
    before_body: BeforeBody | None = None
    # Every handler of the route counts the call (inference.stages.admit, which confirms the
    # key) before it serves, holds or writes anything for the caller.
    confirms_key: bool = False
    # How this route's refusals are rendered once the route is found (a dialect's own shape).
    render_error: ErrorRenderer = error_response

    @property
    def max_body_bytes(self) -> int:
        """The largest body this route accepts, read from settings on every call."""
        return int(getattr(settings, self.body_limit_setting))


def route(
    path: str,
    *,
    methods: dict[str, Handler],
    authenticated: bool = True,
    body_limit_setting: str = "INFRAI_MAX_BODY_BYTES",
    before_body: BeforeBody | None = None,
    confirms_key: bool = False,
    render_error: ErrorRenderer = error_response,
) -> Route:
    """The route of ``path`` (``{name}`` captures one segment; ``{name:path}`` the rest), for
    an endpoint's route table.

    ``body_limit_setting`` names the setting that caps the request body (413 above it): file
    uploads name ``INFRAI_MAX_UPLOAD_BYTES``. ``before_body`` runs after authentication and
    before the body is read (what it puts in ``request.state`` reaches the handler).
    ``confirms_key``: every handler counts the call (:func:`inference.stages.admit`) before it
    serves, holds or writes anything for the caller, so the key is authenticated from this
    process's memory and confirmed there (one Redis round trip fewer); a route without a body
    check only. ``render_error`` renders the route's refusals, from authentication on (the
    OpenAI shape unless the dialect has its own, as ``/v1/messages`` does).
    """
    if confirms_key and before_body is not None:
        raise ValueError("a before_body check would run on an unconfirmed key")
    regex = re.sub(r"\{(\w+):path\}", r"(?P<\1>.+)", path)
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", regex)
    return Route(
        path,
        re.compile(f"^{regex}$"),
        methods,
        authenticated,
        body_limit_setting,
        before_body,
        confirms_key,
        render_error,
    )


Found = tuple[Route, dict[str, str]] | None


def find(routes: Sequence[Route], path: str) -> Found:
    """The route of ``routes`` matching ``path`` and its captured segments, or None (one pass
    over the table per call: its body limit and its handler both come from this)."""
    for candidate in routes:
        match = candidate.pattern.match(path)
        if match:
            return candidate, match.groupdict()
    return None


def body_limit(found: Found) -> int:
    """The body limit of the route :func:`find` found (the default for unknown paths)."""
    if found is None:
        return int(settings.INFRAI_MAX_BODY_BYTES)
    return found[0].max_body_bytes


def resolve(method: str, path: str, found: Found) -> tuple[Route, Handler, dict[str, str]]:
    """The route and handler for a call, or 404 / 405."""
    if found is None:
        raise NotFound(f"Unknown request URL: {method} {path}.", code="unknown_url")
    matched, params = found
    handler = matched.methods.get(method)
    if handler is None:
        allowed = ", ".join(sorted(matched.methods))
        raise MethodNotAllowed(
            f"Method {method} is not allowed on {path}; use {allowed}.",
            code="method_not_allowed",
        )
    return matched, handler, params


def _encode_headers(content_type: bytes, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    out = [(b"content-type", content_type), (b"x-content-type-options", b"nosniff")]
    out.extend((k.lower().encode("ascii"), header_value(str(v))) for k, v in headers.items())
    return out


# What a header value may hold as it is: visible ASCII and the space.
_HEADER_SAFE = "".join(map(chr, range(0x20, 0x7F)))


def header_value(value: str) -> bytes:
    """``value`` as header bytes, whatever it holds: visible ASCII as it is, anything else
    (a line break, a control character, a character beyond ASCII that a caller's data put in a
    value) percent-encoded as UTF-8 — never a response split, never a 500 while answering."""
    if value.isascii() and value.isprintable():  # printable ASCII: 0x20–0x7E
        return value.encode("ascii")
    return quote(value, safe=_HEADER_SAFE).encode("ascii")


def _declared_length(headers: dict[str, str]) -> int:
    """The request's ``Content-Length`` (0 when absent or not a number)."""
    try:
        return max(int(headers.get("content-length", "0")), 0)
    except ValueError:
        return 0


# Records an authenticated call that failed before it had a request-log row (a 400 of
# validation, a 404 or 400 of routing, a 429, a 402 …): inference.settlement.log_unheld_failure.
FailureLogger = Callable[[ApiRequest, ApiError], None]


class V1App:
    """The ``/v1`` ASGI application (see the module docstring for what it does per call):
    ``routes``, in order, and what records an authenticated call that failed before it had
    a request-log row.

    A plain ASGI callable, not a Channels consumer: a ``/v1`` call never uses a channel layer,
    and the consumer machinery (a queue and a dispatch task per request) cost CPU on every
    call and every streamed chunk. Each request carries its server's
    :class:`~inference.floor.Floor` (the scope's ``state``, under
    :data:`inference.floor.SCOPE_KEY`); for a server that passes none, the app keeps one per
    event loop (``floor_for``).
    """

    def __init__(
        self,
        routes: Sequence[Route],
        *,
        on_unlogged_failure: FailureLogger,
        floor_for: Callable[[], Any],
    ) -> None:
        self.routes = tuple(routes)
        self.on_unlogged_failure = on_unlogged_failure
        self.floor_for = floor_for

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        state = scope.get("state")
        request = ApiRequest(
            method=scope["method"],
            path=scope["path"],
            headers=headers,
            body=b"",
            query=parse_qs(scope.get("query_string", b"").decode("latin-1")),
            request_id=new_request_id(),
            started_ns=time.perf_counter_ns(),
            floor=state.get(FLOOR_KEY) if state else None,
        )
        if request.floor is None:
            request.floor = self.floor_for()
        found = find(self.routes, request.path)
        limit = body_limit(found)
        render_error = found[0].render_error if found is not None else error_response
        try:
            if _declared_length(headers) > limit:
                raise too_large(limit)
            matched, handler, request.path_params = resolve(request.method, request.path, found)
            if request.query and (param := unstorable_param(request.query.items())) is not None:
                raise query_value_error(param)
            if matched.authenticated:
                request.key = await authenticate(
                    credentials(headers), confirm=not matched.confirms_key
                )
                request.key_confirmed = not matched.confirms_key
            if matched.before_body is not None:
                await matched.before_body(request)
        except Exception as exc:
            refused = api_error(exc)
            if refused is None:
                await _respond(send, request, render_error(_unexpected(request, exc)))
                return
            self._log_failure(request, refused)
            await _respond(send, request, render_error(refused))
            return
        body = await _read_body(receive, send, request, limit)
        if body is None:
            return
        request.body = body
        await self._serve_until_disconnect(receive, send, request, handler, render_error)

    async def _serve_until_disconnect(
        self,
        receive: Any,
        send: Any,
        request: ApiRequest,
        handler: Handler,
        render_error: ErrorRenderer,
    ) -> None:
        """Run the handler in its own task; a client disconnect cancels it (module
        docstring, step 3) and waits for its cleanup, which a second cancellation cannot
        abort."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._serve(send, request, handler, render_error))
        left = loop.create_task(_disconnected(receive))
        await asyncio.wait((task, left), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            left.cancel()
            task.result()  # _serve raises only what must surface (a failing send)
            return
        task.cancel()
        await asyncio.wait((task,))

    async def _serve(
        self,
        send: Any,
        request: ApiRequest,
        handler: Handler,
        render_error: ErrorRenderer,
    ) -> None:
        try:
            response = await handler(request)
            if request.key is not None and not request.key_confirmed and response.status < 400:
                # A confirms_key route answered without counting the call: a bug; never serve
                # an unconfirmed key (the 401 of a key revoked meanwhile raises here).
                log.error("%s %s answered without confirming its key", request.method, request.path)
                request.key = await authenticate(credentials(request.headers))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = api_error(exc) or _unexpected(request, exc)
            self._log_failure(request, failure)
            response = render_error(failure)
        response.headers = {**_id_headers(request), **response.headers}
        await _send(send, response)

    def _log_failure(self, request: ApiRequest, exc: ApiError) -> None:
        if request.key is not None and not request.logged:
            request.logged = True
            self.on_unlogged_failure(request, exc)


async def _read_body(receive: Any, send: Any, request: ApiRequest, limit: int) -> bytes | None:
    """The request body, counted as it arrives (module docstring, step 2); ``None`` when the
    client left or the body passed ``limit`` (answered 413 here)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: the client left
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            await _respond(send, request, error_response(too_large(limit)))
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _disconnected(receive: Any) -> None:
    """Returns when the server reports that the client went away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send(send: Any, response: Response | StreamingResponse) -> None:
    headers = response.headers
    if isinstance(response, Response):
        headers = {**headers, "content-length": str(len(response.body))}
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": _encode_headers(response.content_type, headers),
        }
    )
    if isinstance(response, Response):
        await send({"type": "http.response.body", "body": response.body, "more_body": False})
        return
    try:
        async for chunk in response.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        aclose = getattr(response.chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        if response.on_close is not None:
            await response.on_close()
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _id_headers(request: ApiRequest) -> dict[str, str]:
    return {"x-infrai-request-id": request.request_id, "x-request-id": request.request_id}


def _unexpected(request: ApiRequest, exc: Exception) -> ApiError:
    """The answer to an exception nothing expected: a retryable 503 when PostgreSQL or Redis
    is out of reach (:mod:`infra.outages`, logged once a second), else a 500 logged with its
    traceback (a bug)."""
    down = outages.unavailable(exc)
    if down is not None:
        return down
    log.exception("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return internal_error()


async def _respond(send: Any, request: ApiRequest, response: Response) -> None:
    """Send a complete response straight to the server (no consumer running yet).

    A 413 also closes the connection, so the rest of the refused body is never read.
    """
    headers = {
        **_id_headers(request),
        **response.headers,
        "content-length": str(len(response.body)),
    }
    if response.status == RequestTooLarge.status:
        headers["connection"] = "close"
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": _encode_headers(response.content_type, headers),
        }
    )
    await send({"type": "http.response.body", "body": response.body, "more_body": False})
