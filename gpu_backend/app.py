"""The Starlette application: OpenAI-compatible routes over the ``Backend``'s services."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from . import MODERATION_MODEL_ID
from .audio import FORMATS, decode, encode
from .backend import Backend, ModerationService
from .chat_api import (
    ChatRequest,
    ChoiceResult,
    chunk_body,
    completion_body,
    completion_id,
    delta_choice,
    now,
    parse_chat_request,
    usage_body,
)
from .embeddings import EmbeddingBatcher
from .endpoints import (
    MODERATION_FIELDS,
    embedding_body,
    moderation_body,
    moderation_texts,
    parse_embedding_request,
    parse_speech_request,
    parse_transcription_request,
)
from .engine import Delta, Event, Finished, GenerationEngine, Sequence
from .errors import APIError
from .metrics import CONTENT_TYPE, backend_families, render
from .multipart import parse_form
from .speech import Synthesizer
from .transcription import Transcriber, to_srt, to_verbose_json, to_vtt, usage
from .validation import reject_unknown

log = logging.getLogger("infrai.gpu_backend.http")

MAX_JSON_BYTES = 40 * 1024 * 1024  # a 25 MB upload as base64 JSON
MAX_UPLOAD_BYTES = 25 * 1024 * 1024


# --- plumbing -------------------------------------------------------------------------------------


def backend_of(request: Request) -> Backend:
    """The ``Backend`` the app was built with."""
    backend: Backend = request.app.state.backend
    return backend


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body; 413 above ``limit`` bytes (checked on the header and while reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"Request body exceeds {limit} bytes.", code="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"Request body exceeds {limit} bytes.", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request) -> dict[str, Any]:
    """The body as a JSON object, or a 400 in OpenAI's shape."""
    raw = await read_body(request, MAX_JSON_BYTES)
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise APIError(400, "The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
    return body


def sse(data: dict[str, Any] | str) -> bytes:
    """One server-sent event line pair."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


# --- chat -----------------------------------------------------------------------------------------


def start_sequences(
    engine: GenerationEngine, request: ChatRequest
) -> tuple[list[Sequence], asyncio.Queue[Any]]:
    """Submit one sequence per choice; events arrive on the returned queue as (index, event)."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    def sink_for(index: int) -> Any:
        def sink(event: Event) -> None:
            # RuntimeError: the event loop is gone (server shutting down)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(events.put_nowait, (index, event))

        return sink

    seqs = [
        engine.new_sequence(request.prompt_ids, p, sink_for(i))
        for i, p in enumerate(request.choices)
    ]
    for seq in seqs:
        engine.submit(seq)
    return seqs, events


def failure(event: Finished) -> APIError | None:
    """The error for a sequence that did not end by itself while its client listened: a 500
    when the engine could not finish it, a 503 when the server is stopping (the engine ended
    it ``cancelled``; a client that left cancels its own sequences only once it is gone)."""
    if event.reason == "error":
        return APIError(
            500, event.error or "generation failed", type="server_error", code="generation_failed"
        )
    if event.reason == "cancelled":
        return APIError(
            503,
            "The model server is shutting down; the generation was stopped. Retry the request.",
            type="server_error",
            code="server_shutting_down",
        )
    return None


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions`` (streaming and not)."""
    body = await read_json(request)
    engine: GenerationEngine = await backend_of(request).service(body.get("model"), "chat")
    chat_request = parse_chat_request(body, str(body["model"]), engine.chat)
    if chat_request.stream:
        return StreamingResponse(
            stream_chat(engine, chat_request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    seqs, events = start_sequences(engine, chat_request)
    results = [ChoiceResult(logprobs=[] if chat_request.logprobs else None) for _ in seqs]

    async def collect() -> None:
        pending = len(seqs)
        while pending:
            index, event = await events.get()
            results[index].add(event)
            if isinstance(event, Finished):
                error = failure(event)
                if error is not None:
                    raise error
                pending -= 1

    try:
        if not await unless_disconnected(request, collect()):
            return Response(status_code=CLIENT_CLOSED)  # nobody reads it
    finally:
        for seq in seqs:
            seq.cancel()
    return JSONResponse(completion_body(completion_id(), now(), chat_request, results))


CLIENT_CLOSED = 499  # nginx's "client closed request": logged, never read


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` unless the client goes first: ``True`` when it finished, ``False`` when the
    client disconnected (``work`` is then cancelled, so the caller frees what it holds at once
    instead of generating for nobody). Exceptions of ``work`` propagate.

    Starlette watches for the disconnect only while a *streaming* body is sent; a non-streamed
    answer is computed before anything is sent, so this listens to ASGI ``receive`` itself (the
    body has been read: the next message is ``http.disconnect``)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        return False
    task.result()
    return True


async def _disconnect(request: Request) -> None:
    """Returns when the client has closed the connection."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def stream_chat(engine: GenerationEngine, request: ChatRequest) -> AsyncIterator[bytes]:
    """SSE chunks: a role chunk per choice, one chunk per text delta, a finish chunk per choice,
    the usage chunk when ``stream_options.include_usage``, then ``data: [DONE]``.

    With ``include_usage`` the first role chunk carries the prompt's usage too (completion 0),
    as vLLM's continuous usage does: a client that stops reading early still knows the prompt's
    count in this model's tokens (the gateway bills a cancelled stream with it)."""
    request_id, created = completion_id(), now()
    seqs, events = start_sequences(engine, request)
    try:
        for index in range(len(seqs)):
            role = delta_choice(
                index,
                {"role": "assistant", "content": "", "refusal": None},
                logprobs=[] if request.logprobs else None,
            )
            prompt = usage_body(len(request.prompt_ids), 0) if index == 0 else None
            yield sse(chunk_body(request_id, created, request, [role], prompt))
        pending, completion_tokens = len(seqs), 0
        while pending:
            index, event = await events.get()
            if isinstance(event, Delta):
                piece = delta_choice(
                    index,
                    {"content": event.text},
                    logprobs=event.logprobs if request.logprobs else None,
                )
                yield sse(chunk_body(request_id, created, request, [piece]))
                continue
            pending -= 1
            error = failure(event)
            if error is not None:
                yield sse(error.body())
                return
            completion_tokens += event.completion_tokens
            yield sse(
                chunk_body(request_id, created, request, [delta_choice(index, {}, event.reason)])
            )
        if request.include_usage:
            usage_chunk = usage_body(len(request.prompt_ids), completion_tokens)
            yield sse(chunk_body(request_id, created, request, [], usage_chunk))
        yield sse("[DONE]")
    finally:
        for seq in seqs:
            seq.cancel()


# --- embeddings and moderation --------------------------------------------------------------------


async def embeddings(request: Request) -> Response:
    """``POST /v1/embeddings`` (batched with concurrent requests)."""
    body = await read_json(request)
    batcher: EmbeddingBatcher = await backend_of(request).service(body.get("model"), "embeddings")
    parsed = parse_embedding_request(body, str(body["model"]), batcher.encoder)
    vectors = await asyncio.wrap_future(batcher.submit(parsed.inputs))
    return JSONResponse(embedding_body(parsed, vectors))


async def moderations(request: Request) -> Response:
    """``POST /v1/moderations`` (``model`` defaults to the local moderation model)."""
    body = await read_json(request)
    reject_unknown(body, MODERATION_FIELDS)
    model = body.get("model") or MODERATION_MODEL_ID
    service: ModerationService = await backend_of(request).service(model, "moderation")
    texts = moderation_texts(body.get("input"))
    encoder = service.batcher.encoder
    vectors = await asyncio.wrap_future(
        service.batcher.submit([encoder.tokenize(t) for t in texts])
    )
    return JSONResponse(moderation_body(model, service.classifier.classify(vectors)))


# --- audio ----------------------------------------------------------------------------------------


async def speech(request: Request) -> Response:
    """``POST /v1/audio/speech``: audio bytes in ``response_format`` (mp3 by default)."""
    body = await read_json(request)
    synthesizer: Synthesizer = await backend_of(request).service(body.get("model"), "speech")
    parsed = parse_speech_request(body)
    samples, rate = await asyncio.to_thread(synthesizer.synthesize, parsed.text, parsed.speed)
    audio = await asyncio.to_thread(encode, samples, rate, parsed.response_format)
    return Response(audio, media_type=FORMATS[parsed.response_format].content_type)


async def transcription_input(request: Request) -> tuple[dict[str, Any], bytes | None]:
    """Fields and uploaded audio from a multipart body, or fields (base64 ``file``) from JSON."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        return await read_json(request), None
    raw = await read_body(request, MAX_UPLOAD_BYTES + 1024 * 1024)
    fields, files = parse_form(content_type, raw)
    if "file" not in files:
        raise APIError(
            400,
            "Missing required parameter: 'file'.",
            code="missing_required_parameter",
            param="file",
        )
    return fields, files["file"]


async def transcriptions(request: Request) -> Response:
    """``POST /v1/audio/transcriptions``: json, text, srt, vtt or verbose_json."""
    fields, upload = await transcription_input(request)
    transcriber: Transcriber = await backend_of(request).service(
        fields.get("model"), "transcription"
    )
    parsed = parse_transcription_request(fields, upload)
    try:
        samples, _ = await asyncio.to_thread(decode, parsed.audio)
    except ValueError:
        # The codec's own words (errno text, library internals) stay in our logs.
        log.info("undecodable audio upload", exc_info=True)
        raise APIError(
            400,
            "The audio file could not be decoded. Send a file in a supported format (flac, "
            "m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav or webm).",
            code="invalid_value",
            param="file",
        ) from None
    transcript = await asyncio.to_thread(
        transcriber.transcribe,
        samples,
        prompt=parsed.prompt,
        temperature=parsed.temperature,
        word_timestamps=parsed.words,
    )
    if parsed.response_format == "text":
        return PlainTextResponse(transcript.text + "\n")
    if parsed.response_format == "srt":
        return PlainTextResponse(to_srt(transcript))
    if parsed.response_format == "vtt":
        return PlainTextResponse(to_vtt(transcript), media_type="text/vtt")
    if parsed.response_format == "verbose_json":
        return JSONResponse(to_verbose_json(transcript, parsed.words, parsed.segments))
    return JSONResponse({"text": transcript.text, "usage": usage(transcript)})


# --- models and health ----------------------------------------------------------------------------


def model_entry(backend: Backend, model_id: str) -> dict[str, Any]:
    """OpenAI's model object."""
    return {
        "id": model_id,
        "object": "model",
        "created": int(backend.started),
        "owned_by": "infrai",
    }


async def list_models(request: Request) -> Response:
    """``GET /v1/models``: every model this server serves (loading ones included)."""
    backend = backend_of(request)
    return JSONResponse(
        {"object": "list", "data": [model_entry(backend, m) for m in backend.slots]}
    )


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{model}``."""
    backend, model_id = backend_of(request), request.path_params["model"]
    if model_id not in backend.slots:
        raise APIError(
            404,
            f"The model `{model_id}` does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    return JSONResponse(model_entry(backend, model_id))


async def health(request: Request) -> Response:
    """``GET /health``: readiness per model, device, batching counters (always 200)."""
    return JSONResponse(backend_of(request).health())


async def stats(request: Request) -> Response:
    """``GET /stats``: the batching counters alone."""
    return JSONResponse(backend_of(request).stats())


async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text (readiness, batch size, queue depth, tokens/s)."""
    text = render(backend_families(backend_of(request)))
    return Response(text, headers={"Content-Type": CONTENT_TYPE})


# --- errors ---------------------------------------------------------------------------------------


async def api_error(request: Request, exc: Exception) -> Response:
    """``APIError`` → its OpenAI body and status."""
    assert isinstance(exc, APIError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's 404/405 → OpenAI's shape."""
    assert isinstance(exc, HTTPException)
    error = APIError(
        exc.status_code,
        f"Invalid URL ({request.method} {request.url.path})",
        code="not_found" if exc.status_code == 404 else "method_not_allowed",
    )
    return JSONResponse(error.body(), status_code=exc.status_code)


async def server_error(request: Request, exc: Exception) -> Response:
    """Anything unexpected → a 500 in OpenAI's shape (details in the server log)."""
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    error = APIError(
        500,
        "The server had an error while processing your request.",
        type="server_error",
        code="internal_error",
    )
    return JSONResponse(error.body(), status_code=500)


class BearerToken:
    """Every request but ``/health`` must carry ``Authorization: Bearer <token>`` (401 in the
    OpenAI shape otherwise). Pure ASGI: nothing is read before the check."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/health":
            sent = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(sent, self.expected):
                error = APIError(
                    401,
                    "Missing or wrong bearer token for this gpu-backend.",
                    type="authentication_error",
                    code="invalid_api_key",
                )
                response = JSONResponse(error.body(), status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(backend: Backend) -> Starlette:
    """The ASGI app; model loading starts in the background when the app starts. With a
    token in the backend's config, every request but ``/health`` must carry it."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        backend.start()
        try:
            yield
        finally:
            backend.shutdown()

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/moderations", moderations, methods=["POST"]),
            Route("/v1/audio/speech", speech, methods=["POST"]),
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        ],
        exception_handlers={
            APIError: api_error,
            HTTPException: http_error,
            Exception: server_error,
        },
        lifespan=lifespan,
        middleware=(
            [Middleware(BearerToken, token=backend.config.token)] if backend.config.token else []
        ),
    )
    app.state.backend = backend
    return app
