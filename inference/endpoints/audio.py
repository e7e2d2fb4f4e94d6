"""``POST /v1/audio/speech`` and ``POST /v1/audio/transcriptions``.

Speech: validate → limit → route (``speech``) → hold (the input's characters at the offering's
price per 1M characters; exact, so the hold is the charge) → call with failover until a vendor
answers → the audio relayed as the vendor sends it (chunked), settled when it ends. The
``X-Infrai-*`` headers carry cost and vendor (a binary body has no ``infrai`` object). The
input's characters are charged when the audio was sent whole or the client left; a vendor
that breaks mid-audio is charged nothing (the request log says ``vendor_stream_interrupted``).

Transcriptions: the body is ``multipart/form-data`` exactly as the OpenAI SDKs send it, or JSON
with the file as base64 (or a ``data:`` URL); the route accepts bodies up to
``INFRAI_MAX_UPLOAD_BYTES`` (413 above). The audio's duration is measured from the file with
PyAV before anything is held (an undecodable file is a 400); billing is per second of audio,
metered in milliseconds. Without PyAV the hold assumes the lowest bitrate speech is sent at and
the vendor's ``verbose_json`` duration is charged. ``json`` and ``verbose_json`` answers carry
the ``infrai`` object; ``text``, ``srt`` and ``vtt`` are returned as the vendor wrote them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, cast

from django.conf import settings

from billing.pricing import Usage
from config.errors import InvalidRequest, RequestTooLarge, invalid_type, missing_param
from inference.chat.validation import number
from inference.endpoints import metered
from inference.http import ApiRequest, Response, StreamingResponse, json_response, route
from inference.models import RequestStatus
from inference.vendors.base import JSON
from inference.vendors.errors import VendorError

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
_CHUNK_BYTES = 64 * 1024
# The lowest bitrate speech is practically encoded at (4 kbit/s): an upper bound of the
# duration of a file we cannot decode ourselves.
_MIN_BYTES_PER_SECOND = 500


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


async def speech(request: ApiRequest) -> StreamingResponse:
    """``POST /v1/audio/speech``. See the module docstring."""
    parsed = parse_speech_request(request.json())
    usage = Usage(characters=parsed.characters)
    call = await metered.open_call(
        request,
        endpoint=SPEECH_ENDPOINT,
        routing=parsed.routing,
        capability="speech",
        limit_tokens=parsed.characters // 4,
        expected=usage,
        worst_case=lambda _candidate: usage,
    )
    call.prompt = str(parsed.payload["input"])
    async with call.closed_on_failure():
        content_type, audio = await call.call(
            lambda adapter, target, _c: adapter.speech_stream(target, parsed.payload)
        )
    # Speech is priced by the input's characters, known now: the headers carry the cost.
    call.charge(usage)
    if not content_type.startswith("audio/"):
        content_type = SPEECH_FORMATS[parsed.response_format]

    async def relay() -> AsyncIterator[bytes]:
        status, code = RequestStatus.CANCELLED, "client_disconnected"
        call.streaming(lambda: usage)
        try:
            async for chunk in audio:
                yield chunk
            status, code = RequestStatus.OK, ""
        except VendorError:
            # The audio is cut short: nothing is charged for it.
            call.vendor_failed_midway()
            call.charge(Usage())
            status, code = RequestStatus.VENDOR_ERROR, "vendor_stream_interrupted"
        finally:
            await audio.aclose()
            await call.finish(status=status, http_status=200, error_code=code)

    async def on_close() -> None:
        await audio.aclose()
        await call.finish(status=RequestStatus.CANCELLED, http_status=499)

    return StreamingResponse(
        relay(), headers=call.headers(), content_type=content_type.encode(), on_close=on_close
    )


# --- transcriptions --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Upload:
    """The uploaded audio file."""

    filename: str
    content: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    """A validated transcription request: the fields to forward and the audio."""

    fields: dict[str, str | list[str]]
    routing: metered.Routing
    upload: Upload
    response_format: str
    duration_ms: int | None


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, Any], dict[str, Upload]]:
    """``(fields, files)`` of a ``multipart/form-data`` body; repeated fields become lists.

    Raises a 400 (param ``file``) when the body is not well-formed multipart.
    """
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise InvalidRequest(
            "Malformed multipart/form-data body.", code="invalid_value", param="file"
        )
    fields: dict[str, Any] = {}
    files: dict[str, Upload] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is not None:
            files[name] = Upload(filename, data, part.get_content_type())
            continue
        text = data.decode(part.get_content_charset() or "utf-8", errors="replace")
        if name in fields:
            existing = fields[name]
            fields[name] = [*existing, text] if isinstance(existing, list) else [existing, text]
        else:
            fields[name] = text
    return fields, files


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


def audio_duration_ms(content: bytes) -> int | None:
    """Milliseconds of audio in ``content`` decoded with PyAV; ``None`` without PyAV.

    Raises a 400 (param ``file``) for a file that holds no decodable audio.
    """
    try:
        import av
    except ImportError:
        return None
    try:
        with av.open(io.BytesIO(content), mode="r") as container:
            if not container.streams.audio:
                raise ValueError("no audio stream")
            stream = container.streams.audio[0]
            samples = sum(frame.samples for frame in container.decode(stream))
            rate = stream.rate or stream.codec_context.sample_rate
    except (av.error.FFmpegError, ValueError, IndexError) as exc:
        raise InvalidRequest(
            f"The uploaded file is not audio we can decode ({exc}).",
            code="invalid_value",
            param="file",
        ) from None
    if not rate or not samples:
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
    """Validate a transcription (multipart or JSON) and measure its audio; 400/413 on errors."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        fields, files = parse_multipart(content_type, request.body)
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
    duration_ms = await asyncio.to_thread(audio_duration_ms, upload.content)
    return TranscriptionRequest(
        fields=_form(fields),
        routing=routing,
        upload=upload,
        response_format=fmt,
        duration_ms=duration_ms,
    )


def transcription_usage(
    request: TranscriptionRequest, answer: JSON | str, held_ms: int
) -> tuple[Usage, bool]:
    """Our measured duration; else the vendor's ``duration``; else the held bound (estimated)."""
    if request.duration_ms is not None:
        return Usage(audio_ms=request.duration_ms), False
    if isinstance(answer, dict) and isinstance(answer.get("duration"), int | float):
        return Usage(audio_ms=round(float(answer["duration"]) * 1000)), False
    return Usage(audio_ms=held_ms), True


async def transcriptions(request: ApiRequest) -> Response:
    """``POST /v1/audio/transcriptions``. See the module docstring."""
    parsed = await parse_transcription_request(request)
    held_ms = parsed.duration_ms
    if held_ms is None:
        held_ms = len(parsed.upload.content) * 1000 // _MIN_BYTES_PER_SECOND
    worst = Usage(audio_ms=held_ms)
    call = await metered.open_call(
        request,
        endpoint=TRANSCRIPTION_ENDPOINT,
        routing=parsed.routing,
        capability="transcription",
        limit_tokens=0,
        expected=worst,
        worst_case=lambda _candidate: worst,
    )
    file = (parsed.upload.filename, parsed.upload.content, parsed.upload.content_type)
    # httpx sends a list value as repeated form fields (timestamp_granularities[]).
    fields = cast(dict[str, str], parsed.fields)
    answer = await metered.call_and_settle(
        call,
        lambda adapter, target, _c: adapter.transcribe(target, fields, file),
        lambda result: transcription_usage(parsed, result, held_ms),
    )
    if isinstance(answer, dict):
        return json_response({**answer, "infrai": call.infrai()}, headers=call.headers())
    content_type = _TEXT_CONTENT_TYPES.get(parsed.response_format, b"text/plain; charset=utf-8")
    return Response(answer.encode(), headers=call.headers(), content_type=content_type)


route("/v1/audio/speech", methods={"POST": speech})
route(
    "/v1/audio/transcriptions",
    methods={"POST": transcriptions},
    body_limit_setting="INFRAI_MAX_UPLOAD_BYTES",
)
