"""``POST /v1/audio/speech`` and ``POST /v1/audio/transcriptions``.

Speech: validate → limit → route (``speech``) → hold (the input's characters at the offering's
price per 1M characters; exact, so the hold is the charge) → call with failover until a vendor
answers → the audio relayed as the vendor sends it (chunked), settled when it ends. The
``X-Infrai-*`` headers carry cost and vendor (a binary body has no ``infrai`` object). The
input's characters are charged when the audio was sent whole or the client left; a vendor
that breaks mid-audio is charged nothing (the request log says ``vendor_stream_interrupted``).

Transcriptions: the body is ``multipart/form-data`` exactly as the OpenAI SDKs send it, or JSON
with the file as base64 (or a ``data:`` URL); the route accepts bodies up to
``INFRAI_MAX_UPLOAD_BYTES`` (413 above). Before a byte of the body is read the call is counted
against the key's limits (429) and a wallet with nothing available is refused (402). The body
is then parsed in a worker thread (at most 16 parts, else 400) and the audio's duration probed
there from the container's metadata (one packet decoded to prove it is audio; the frames are
counted only when the metadata has no plausible duration, and then no further than
``INFRAI_MAX_AUDIO_SECONDS``). Longer audio, or a file that is not audio, is a 400 naming
``file``; the hold is the probed duration at the offering's price per second, and that duration
is charged (metered in milliseconds). ``json`` and ``verbose_json`` answers carry the ``infrai``
object; ``text``, ``srt`` and ``vtt`` are returned as the vendor wrote them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import io
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from billing.selectors import wallet_summary
from catalog.routing import RoutingRequest
from config.errors import (
    InsufficientQuota,
    InvalidRequest,
    RequestTooLarge,
    invalid_type,
    missing_param,
)
from inference import multipart, relay, render, response_cache, settlement, stages
from inference.call import Call
from inference.endpoints import metered
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.multipart import Upload
from inference.usage import Billed
from inference.validation import number
from inference.vendors.base import JSON
from infra.background import spawn
from infra.db import db_async
from money.pricing import Usage
from money.usd import nanos_to_usd_str

SPEECH_ENDPOINT = "audio.speech"
TRANSCRIPTION_ENDPOINT = "audio.transcriptions"
MAX_SPEECH_CHARS = 4096
SPEECH_FORMATS = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
TRANSCRIPTION_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
_TEXT_CONTENT_TYPES = {
    "text": b"text/plain; charset=utf-8",
    "srt": b"text/plain; charset=utf-8",
    "vtt": b"text/vtt; charset=utf-8",
}
_SPEECH_FIELDS = {
    "model", "input", "voice", "instructions", "response_format", "speed", "stream_format",
}  # fmt: skip
_TRANSCRIPTION_FIELDS = {
    "file", "model", "language", "prompt", "response_format", "temperature",
    "timestamp_granularities", "timestamp_granularities[]", "include", "include[]", "stream",
}  # fmt: skip
# More bytes per second than any audio encoding uses (192 kHz, 32-bit, stereo): metadata that
# states a shorter duration than this allows for the file's size is not believed.
_MAX_BYTES_PER_SECOND = 1_536_000
_HEADER_ALLOWANCE_BYTES = 64 * 1024


# --- speech ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """A validated speech request."""

    payload: JSON
    routing: metered.Routing
    characters: int
    response_format: str


def parse_speech_request(data: dict[str, Any]) -> SpeechRequest:
    """Validate a speech body; 400 with ``param`` naming the field."""
    metered.reject_unknown(data, _SPEECH_FIELDS)
    routing = metered.routing_fields(data)
    text = metered.required_text(data, "input", MAX_SPEECH_CHARS)
    voice = data.get("voice")
    if voice is None:
        raise missing_param("voice")
    voice_id = voice.get("id") if isinstance(voice, dict) else voice
    if not isinstance(voice_id, str) or not voice_id:
        raise invalid_type("voice", "a voice name or {'id': ...}")
    fmt = metered.choice(data, "response_format", tuple(SPEECH_FORMATS), "mp3")
    number(data, "speed", 0.25, 4.0)
    metered.optional_string(data, "instructions")
    metered.choice(data, "stream_format", ("audio",), "audio")
    payload = {k: v for k, v in data.items() if k in _SPEECH_FIELDS - {"model"} and v is not None}
    payload["response_format"] = fmt
    return SpeechRequest(
        payload=payload, routing=routing, characters=len(text), response_format=fmt
    )


async def speech(request: ApiRequest) -> Response | StreamingResponse:
    """``POST /v1/audio/speech``. See the module docstring."""
    data = request.json()
    parsed = parse_speech_request(data)
    usage = Usage(characters=parsed.characters)
    key = response_cache.cache_key(
        organization_id=request.caller.organization_id,
        endpoint=SPEECH_ENDPOINT,
        payload={k: v for k, v in data.items() if k != "user"},
        extra=[parsed.routing.task, parsed.routing.prefer],
    )
    hit = await response_cache.lookup(key)
    if hit is not None:
        return await _speech_from_cache(request, parsed, hit)
    call = await metered.open_call(
        request,
        endpoint=SPEECH_ENDPOINT,
        routing=parsed.routing,
        capability="speech",
        limit_tokens=parsed.characters // 4,
        expected=usage,
        worst_case=lambda _candidate: usage,
    )
    call.prompt = lambda: str(parsed.payload["input"])
    async with stages.closed_on_failure(call):
        content_type, audio = await stages.call_vendor(
            call, lambda adapter, target, _c: adapter.speech_stream(target, parsed.payload)
        )
    # Speech is priced by the input's characters, known now: the headers carry the cost.
    call.charge(usage)
    if not content_type.startswith("audio/"):
        content_type = SPEECH_FORMATS[parsed.response_format]
    meter = SpeechMeter(usage, cache_key=key, content_type=content_type)

    async def on_close() -> None:  # the response ended before the relay started
        await audio.aclose()
        await settlement.finish(call, status=RequestStatus.CANCELLED, http_status=499)

    return StreamingResponse(
        relay.relay(call, audio, meter, audio.aclose),
        headers=render.headers(call),
        content_type=content_type.encode(),
        on_close=on_close,
    )


async def _speech_from_cache(
    request: ApiRequest, parsed: SpeechRequest, hit: dict[str, Any]
) -> Response:
    """Audio of an identical earlier request: costs nothing, logged like any call."""
    call = Call.open(request, endpoint=SPEECH_ENDPOINT, requested_model=parsed.routing.model)
    await stages.admit(call, tokens=parsed.characters // 4)
    await stages.finish_cached(call, hit, Usage(characters=parsed.characters))
    audio = base64.b64decode(hit["audio_b64"])
    return Response(audio, headers=render.headers(call), content_type=hit["content_type"].encode())


# Audio longer than this is relayed but not cached (the cache is Redis memory).
MAX_CACHED_AUDIO_BYTES = 2 * 1024 * 1024


class SpeechMeter:
    """The speech stream's :class:`~inference.relay.Meter`: audio bytes relayed as they come.

    The input's characters are charged when the audio was sent whole or the client left; audio
    that the vendor cut short costs nothing (a binary stream has no error channel: it ends).
    Whole audio up to :data:`MAX_CACHED_AUDIO_BYTES` is kept for the exact cache.
    """

    def __init__(self, usage: Usage, *, cache_key: str = "", content_type: str = "") -> None:
        self._usage = usage
        self._cache_key, self._content_type = cache_key, content_type
        self._kept: list[bytes] | None = [] if cache_key else None
        self._size = 0

    def start(self) -> Iterable[bytes]:
        return ()

    def feed(self, item: Any) -> Iterable[bytes]:
        if not isinstance(item, bytes):
            raise relay.MalformedChunk("audio that is not bytes")
        if self._kept is not None:
            self._size += len(item)
            if self._size > MAX_CACHED_AUDIO_BYTES:
                self._kept = None
            else:
                self._kept.append(item)
        return (item,)

    def complete(self) -> bool:
        return False

    def usage(self, outcome: relay.Outcome) -> Billed:
        return Billed(Usage() if outcome is relay.Outcome.FAULT else self._usage)

    def tail(self, call: Call, fault: relay.Fault | None) -> Iterable[bytes]:
        if fault is None and self._kept is not None and call.served_by is not None:
            entry = {
                "audio_b64": base64.b64encode(b"".join(self._kept)).decode(),
                "content_type": self._content_type,
                **call.answer.entry(),
            }
            spawn(response_cache.store(self._cache_key, entry))
        return ()


# --- transcriptions --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    """A validated transcription request: the fields to forward and the audio."""

    fields: dict[str, str | list[str]]
    routing: metered.Routing
    upload: Upload
    response_format: str
    duration_ms: int


def _base64_upload(value: Any) -> Upload:
    """The file of a JSON request: base64, or a ``data:audio/...;base64,`` URL."""
    if not isinstance(value, str) or not value:
        raise invalid_type("file", "base64-encoded audio or a data URL")
    content_type = "application/octet-stream"
    if value.startswith("data:"):
        header, _, value = value.partition(",")
        content_type = header.removeprefix("data:").split(";")[0] or content_type
    try:
        content = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(
            "'file' is not valid base64 audio.", code="invalid_value", param="file"
        ) from None
    return Upload("audio", content, content_type)


def _undecodable() -> InvalidRequest:
    # A fixed message: the codec's own error text (errno strings, offsets) is no help to callers.
    return InvalidRequest(
        "The uploaded file is not audio we can decode. Supported: flac, m4a, mp3, mp4, mpeg, "
        "mpga, oga, ogg, wav, webm.",
        code="invalid_value",
        param="file",
    )


def _too_long(max_ms: int) -> InvalidRequest:
    return InvalidRequest(
        f"The audio is longer than the limit of {max_ms // 1000} seconds.",
        code="invalid_value",
        param="file",
    )


def audio_duration_ms(content: bytes, *, max_ms: int) -> int:
    """Milliseconds of audio in ``content``, probed cheaply.

    The container's metadata gives the duration (a WAV or FLAC header, an MP3's frame count,
    an Ogg's last page) and one packet is decoded to prove the audio is decodable. Only when
    the metadata gives no duration, or one too short for the file's size (a header understating
    it), are the frames decoded and counted — and then only up to ``max_ms``. 400 (param
    ``file``) for a file with no decodable audio, or audio longer than ``max_ms``. CPU-bound:
    run it in a worker thread.
    """
    import av  # PyAV (a dependency) loads FFmpeg: only once a transcription arrives

    try:
        with av.open(io.BytesIO(content), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise _undecodable()
            stream = container.streams.audio[0]
            rate = stream.rate or stream.codec_context.sample_rate
            if not rate:
                raise _undecodable()
            declared_ms = _declared_ms(stream, container.duration)
            if declared_ms and _plausible(declared_ms, stream.codec_context.bit_rate, content):
                if declared_ms > max_ms:
                    raise _too_long(max_ms)
                if not any(frame.samples for frame in _first_frames(container, stream)):
                    raise _undecodable()
                return declared_ms
            return _counted_ms(container, stream, rate, max_ms)
    except (av.error.FFmpegError, ValueError, IndexError, OverflowError):
        raise _undecodable() from None


def _declared_ms(stream: Any, container_duration_us: int | None) -> int:
    """The duration the metadata states, rounded up to a millisecond (0 when it states none)."""
    if stream.duration and stream.time_base:
        return math.ceil(stream.duration * stream.time_base * 1000)
    if container_duration_us and container_duration_us > 0:
        return -(-container_duration_us // 1000)
    return 0


def _plausible(declared_ms: int, bit_rate: int | None, content: bytes) -> bool:
    """Whether a file of this size can hold only ``declared_ms`` of audio.

    At the codec's stated bit rate (twice it, plus room for headers and cover art), or at
    :data:`_MAX_BYTES_PER_SECOND` for codecs that state none (FLAC, some Opus): a header that
    understates the duration of the audio behind it is caught here, and the frames are counted.
    """
    bytes_per_s = (bit_rate // 8) * 2 if bit_rate and bit_rate > 0 else _MAX_BYTES_PER_SECOND
    return len(content) <= declared_ms * bytes_per_s // 1000 + _HEADER_ALLOWANCE_BYTES


def _first_frames(container: Any, stream: Any, packets: int = 8) -> Iterator[Any]:
    """The frames of the first few packets (an encoder may need several before its first)."""
    for index, packet in enumerate(container.demux(stream)):
        if index >= packets:
            return
        yield from packet.decode()


def _counted_ms(container: Any, stream: Any, rate: int, max_ms: int) -> int:
    """Decode and count samples, stopping (400) as soon as they pass ``max_ms``."""
    samples = 0
    max_samples = max_ms * rate // 1000
    for frame in container.decode(stream):
        samples += frame.samples
        if samples > max_samples:
            raise _too_long(max_ms)
    if not samples:
        raise InvalidRequest(
            "The uploaded file holds no audio.", code="invalid_value", param="file"
        )
    return -(-samples * 1000 // rate)


def _form(fields: dict[str, Any]) -> dict[str, str | list[str]]:
    """Forwardable fields (strings, repeated ones as lists); JSON values become strings."""
    out: dict[str, str | list[str]] = {}
    for name, value in fields.items():
        if name in ("file", "model", "task", "prefer") or value is None:
            continue
        if isinstance(value, list):
            out[name] = [str(v) for v in value]
        elif isinstance(value, str):
            out[name] = value
        else:
            out[name] = json.dumps(value)
    return out


def _check_transcription_options(fields: dict[str, Any], fmt: str) -> None:
    """``temperature`` 0..1 and ``timestamp_granularities`` (word/segment, verbose_json only)."""
    temperature = fields.get("temperature")
    if temperature is not None:
        try:
            value = float(temperature)
        except (TypeError, ValueError):
            raise invalid_type("temperature", "a number") from None
        number({"temperature": value}, "temperature", 0.0, 1.0)
    raw = fields.get("timestamp_granularities[]", fields.get("timestamp_granularities"))
    granularities = raw if isinstance(raw, list) else [] if raw is None else [raw]
    if any(g not in ("word", "segment") for g in granularities):
        raise InvalidRequest(
            "'timestamp_granularities' may hold 'word' and 'segment'.",
            code="invalid_value",
            param="timestamp_granularities",
        )
    if granularities and fmt != "verbose_json":
        raise InvalidRequest(
            "'timestamp_granularities' requires response_format 'verbose_json'.",
            code="invalid_value",
            param="timestamp_granularities",
        )


async def parse_transcription_request(request: ApiRequest) -> TranscriptionRequest:
    """Validate a transcription (multipart or JSON) and probe its audio; 400/413 on errors.

    The body is parsed and the audio probed in worker threads, never on the event loop.
    """
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        fields, files = await multipart.aparse(content_type, request.body)
        upload = files.get("file")
        if upload is None:
            raise missing_param("file")
    else:
        fields = request.json()
        if "file" not in fields:
            raise missing_param("file")
        upload = _base64_upload(fields["file"])
    metered.reject_unknown(fields, _TRANSCRIPTION_FIELDS)
    routing = metered.routing_fields(fields)
    limit = settings.INFRAI_MAX_UPLOAD_BYTES
    if len(upload.content) > limit:
        raise RequestTooLarge(f"The uploaded file is larger than the limit of {limit} bytes.")
    if not upload.content:
        raise InvalidRequest("'file' is empty.", code="invalid_value", param="file")
    fmt = metered.choice(fields, "response_format", TRANSCRIPTION_FORMATS, "json")
    if str(fields.get("stream", "false")).lower() not in ("false", "0"):
        raise InvalidRequest(
            "Streaming transcription is not supported; leave 'stream' unset.",
            code="unsupported_parameter",
            param="stream",
        )
    _check_transcription_options(fields, fmt)
    max_ms = int(settings.INFRAI_MAX_AUDIO_SECONDS) * 1000
    duration_ms = await asyncio.to_thread(audio_duration_ms, upload.content, max_ms=max_ms)
    return TranscriptionRequest(
        fields=_form(fields),
        routing=routing,
        upload=upload,
        response_format=fmt,
        duration_ms=duration_ms,
    )


async def _before_transcription_body(request: ApiRequest) -> None:
    """Before a byte of the upload is read: count the call against the key's limits (429) and
    refuse a wallet with nothing available (402), so neither costs a parse or a decode."""
    call = Call.open(request, endpoint=TRANSCRIPTION_ENDPOINT, requested_model="auto")
    await stages.admit(call, tokens=0)
    summary = await _wallet_summary(organization_id=request.caller.organization_id)
    if summary.available_nanos <= 0:
        raise InsufficientQuota(
            "You exceeded your current quota: your organization's available balance is "
            f"${nanos_to_usd_str(max(summary.available_nanos, 0))}. Add credit in the "
            "dashboard to continue.",
            code="insufficient_quota",
        )
    request.state["call"] = call


_wallet_summary = db_async(wallet_summary)


async def transcriptions(request: ApiRequest) -> Response:
    """``POST /v1/audio/transcriptions``. See the module docstring."""
    call: Call = request.state["call"]  # counted by _before_transcription_body
    parsed = await parse_transcription_request(request)
    # The probed duration is both the hold and the charge.
    worst = Usage(audio_ms=parsed.duration_ms)
    call.ctx = dataclasses.replace(call.ctx, requested_model=parsed.routing.model)
    key = _transcription_key(request, parsed)
    hit = None if key is None else await response_cache.lookup(key)
    if key is not None and hit is not None:
        await stages.finish_cached(call, hit, Usage(**hit["usage"]))
        return _transcription_response(call, parsed, hit["answer"])
    await stages.route(
        call,
        RoutingRequest(
            model=parsed.routing.model,
            capabilities=frozenset({"transcription"}),
            params={},
            task=parsed.routing.task,
            prefer=parsed.routing.prefer,
            expected_usage=worst,
        ),
    )
    await stages.hold(call, lambda _candidate: worst)
    file = (parsed.upload.filename, parsed.upload.content, parsed.upload.content_type)
    fields = parsed.fields
    answer = await stages.call_and_settle(
        call,
        lambda adapter, target, _c: adapter.transcribe(target, fields, file),
        lambda _result: Billed(worst),
    )
    if key is not None:
        entry = {"answer": answer, "usage": dataclasses.asdict(call.usage), **call.answer.entry()}
        spawn(response_cache.store(key, entry))
    return _transcription_response(call, parsed, answer)


def _transcription_key(request: ApiRequest, parsed: TranscriptionRequest) -> str | None:
    """The exact-cache key of a transcription (the audio's digest and every field), or None
    when sampling makes the answer non-deterministic (``temperature`` above 0)."""
    temperature = parsed.fields.get("temperature")
    if temperature not in (None, "", "0", "0.0"):
        return None
    return response_cache.cache_key(
        organization_id=request.caller.organization_id,
        endpoint=TRANSCRIPTION_ENDPOINT,
        payload={
            "file_sha256": hashlib.sha256(parsed.upload.content).hexdigest(),
            **{k: v for k, v in parsed.fields.items() if k != "user"},
        },
        extra=[parsed.routing.model, parsed.routing.task, parsed.routing.prefer],
    )


def _transcription_response(call: Call, parsed: TranscriptionRequest, answer: Any) -> Response:
    if isinstance(answer, dict):
        return json_response(
            {**answer, "infrai": render.infrai(call)}, headers=render.headers(call)
        )
    content_type = _TEXT_CONTENT_TYPES.get(parsed.response_format, b"text/plain; charset=utf-8")
    return Response(str(answer).encode(), headers=render.headers(call), content_type=content_type)


# The routes of this module, for the app's table (config.asgi).
ROUTES = (
    route("/v1/audio/speech", methods={"POST": speech}, confirms_key=True),
    route(
        "/v1/audio/transcriptions",
        methods={"POST": transcriptions},
        body_limit_setting="INFRAI_MAX_UPLOAD_BYTES",
        before_body=_before_transcription_body,
    ),
)
