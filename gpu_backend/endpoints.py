"""Request parsing and response shapes for embeddings, moderations, speech and transcriptions."""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from typing import Any

import torch

from .audio import FORMATS
from .embeddings import DIMENSIONS, MAX_SEQ_LENGTH, Encoder
from .errors import invalid
from .moderation import ModerationResult
from .moderation_exemplars import CATEGORIES
from .speech import MAX_INPUT_CHARS, OPENAI_VOICES
from .transcription import RESPONSE_FORMATS
from .validation import choice, number, reject_unknown, string

MAX_EMBEDDING_INPUTS = 2048

# --- embeddings -----------------------------------------------------------------------------------

EMBEDDING_FIELDS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})


@dataclass(frozen=True)
class EmbeddingRequest:
    """A validated embeddings request: token ids per input and the output encoding."""

    model: str
    inputs: list[list[int]]
    encoding_format: str


def _is_token_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def embedding_inputs(raw: Any, encoder: Encoder) -> list[list[int]]:
    """OpenAI's ``input`` (string, strings, token ids, or lists of token ids) → token-id lists.

    Strings are tokenized with [CLS]/[SEP] and truncated to 256 tokens (the model's
    ``max_seq_length``); token-id inputs are this model's ids, used as given (truncated likewise).
    """
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif _is_token_list(raw):
        items = [raw]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise invalid("'input' must be a non-empty string or array.", "input")
    if len(items) > MAX_EMBEDDING_INPUTS:
        raise invalid(f"'input' may hold at most {MAX_EMBEDDING_INPUTS} items.", "input")
    result = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise invalid(f"'input[{index}]' must not be empty.", "input")
            result.append(encoder.tokenize(item))
        elif _is_token_list(item):
            if not all(0 <= t < encoder.vocab_size for t in item):
                raise invalid(f"'input[{index}]' holds a token id outside the vocabulary.", "input")
            result.append(list(item)[:MAX_SEQ_LENGTH])
        else:
            raise invalid(
                f"Invalid type for 'input[{index}]': expected a string or token ids.",
                "input",
                "invalid_type",
            )
    return result


def parse_embedding_request(body: dict[str, Any], model: str, encoder: Encoder) -> EmbeddingRequest:
    """Validate an embeddings body for the MiniLM encoder."""
    reject_unknown(body, EMBEDDING_FIELDS)
    dimensions = body.get("dimensions")
    if dimensions is not None and dimensions != DIMENSIONS:
        raise invalid(
            f"This model has {DIMENSIONS} dimensions and does not support 'dimensions'.",
            "dimensions",
            "unsupported_parameter",
        )
    fmt = choice(body, "encoding_format", ("float", "base64"), "float")
    return EmbeddingRequest(model, embedding_inputs(body.get("input"), encoder), fmt)


def encode_vector(vector: torch.Tensor, encoding_format: str) -> list[float] | str:
    """One embedding as floats or as base64 of little-endian float32 (OpenAI's ``base64``)."""
    values = vector.numpy().astype("<f4")
    if encoding_format == "base64":
        return base64.b64encode(values.tobytes()).decode("ascii")
    return [float(v) for v in values]


def embedding_body(request: EmbeddingRequest, vectors: torch.Tensor) -> dict[str, Any]:
    """OpenAI's embeddings list object, usage counting the tokens encoded."""
    tokens = sum(len(ids) for ids in request.inputs)
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": i,
                "embedding": encode_vector(v, request.encoding_format),
            }
            for i, v in enumerate(vectors)
        ],
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


# --- moderations ----------------------------------------------------------------------------------

MODERATION_FIELDS = frozenset({"model", "input"})


def moderation_texts(raw: Any) -> list[str]:
    """OpenAI's moderation ``input``: a string, strings, or text parts (images are refused)."""
    if isinstance(raw, str):
        return [raw]
    if not isinstance(raw, list) or not raw:
        raise invalid("'input' must be a non-empty string or array.", "input")
    if all(isinstance(item, str) for item in raw):
        return list(raw)
    texts = []
    for item in raw:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text" and isinstance(item.get("text"), str):
            texts.append(item["text"])
        elif kind == "image_url":
            raise invalid(
                "This moderation model classifies text only.", "input", "unsupported_content"
            )
        else:
            raise invalid("Invalid item in 'input'.", "input")
    return [" ".join(texts)]


def moderation_body(model: str, results: list[ModerationResult]) -> dict[str, Any]:
    """OpenAI's moderation object: ``flagged``, ``categories`` and ``category_scores``."""
    return {
        "id": "modr-" + secrets.token_hex(12),
        "model": model,
        "results": [
            {
                "flagged": r.flagged,
                "categories": r.categories,
                "category_scores": r.category_scores,
                "category_applied_input_types": {c: ["text"] for c in CATEGORIES},
            }
            for r in results
        ],
    }


# --- speech ---------------------------------------------------------------------------------------

SPEECH_FIELDS = frozenset(
    {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
)


@dataclass(frozen=True)
class SpeechRequest:
    """A validated ``/v1/audio/speech`` request."""

    text: str
    response_format: str
    speed: float


def parse_speech_request(body: dict[str, Any]) -> SpeechRequest:
    """Validate a speech body: text ≤ 4096 chars, an OpenAI voice, format and speed 0.25–4."""
    reject_unknown(body, SPEECH_FIELDS)
    text = string(body, "input", required=True)
    assert text is not None
    if not text.strip():
        raise invalid("'input' must not be empty.", "input")
    if len(text) > MAX_INPUT_CHARS:
        raise invalid(
            f"'input' is longer than {MAX_INPUT_CHARS} characters.",
            "input",
            "string_above_max_length",
        )
    voice = body.get("voice")
    voice_id = voice.get("id") if isinstance(voice, dict) else voice
    if voice_id not in OPENAI_VOICES:
        raise invalid(
            f"Invalid value for 'voice': {voice_id!r}. Supported: "
            + ", ".join(sorted(OPENAI_VOICES)),
            "voice",
        )
    string(body, "instructions")  # accepted; the voice has no style control
    if body.get("stream_format") not in (None, "audio"):
        raise invalid(
            "Only stream_format 'audio' is supported.", "stream_format", "unsupported_parameter"
        )
    fmt = choice(body, "response_format", tuple(FORMATS), "mp3")
    speed = number(body, "speed", 0.25, 4.0, default=1.0)
    assert speed is not None
    return SpeechRequest(text=text, response_format=fmt, speed=speed)


# --- transcriptions -------------------------------------------------------------------------------

TRANSCRIPTION_FIELDS = frozenset(
    {
        "file",
        "model",
        "language",
        "prompt",
        "response_format",
        "temperature",
        "timestamp_granularities",
        "timestamp_granularities[]",
        "stream",
        "chunking_strategy",
        "include",
        "include[]",
    }
)


@dataclass(frozen=True)
class TranscriptionRequest:
    """A validated transcription request (audio still encoded)."""

    audio: bytes
    prompt: str | None
    response_format: str
    temperature: float
    words: bool
    segments: bool


def decode_base64_audio(value: str) -> bytes:
    """Audio from base64 or a ``data:audio/...;base64,`` URL."""
    payload = value.split(",", 1)[1] if value.startswith("data:") else value
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid("'file' is not valid base64 audio.", "file") from None


def parse_transcription_request(
    fields: dict[str, Any], audio: bytes | None
) -> TranscriptionRequest:
    """Validate transcription fields (from multipart or JSON) and the audio bytes."""
    reject_unknown(fields, TRANSCRIPTION_FIELDS)
    if audio is None:
        file_field = fields.get("file")
        if not isinstance(file_field, str):
            raise invalid(
                "Missing required parameter: 'file'.", "file", "missing_required_parameter"
            )
        audio = decode_base64_audio(file_field)
    if not audio:
        raise invalid("'file' is empty.", "file")
    language = fields.get("language")
    if language not in (None, "", "en"):
        raise invalid("This model transcribes English only ('language' must be 'en').", "language")
    if str(fields.get("stream", "false")).lower() == "true":
        raise invalid(
            "Streaming transcription is not supported by this model.",
            "stream",
            "unsupported_parameter",
        )
    fmt = choice(fields, "response_format", RESPONSE_FORMATS, "json")
    temperature = number(_numeric(fields, "temperature"), "temperature", 0.0, 1.0, default=0.0)
    assert temperature is not None
    granularities = _as_list(
        fields.get("timestamp_granularities[]", fields.get("timestamp_granularities"))
    )
    if any(g not in ("word", "segment") for g in granularities):
        raise invalid(
            "'timestamp_granularities' may hold 'word' and 'segment'.", "timestamp_granularities"
        )
    if granularities and fmt != "verbose_json":
        raise invalid(
            "'timestamp_granularities' requires response_format 'verbose_json'.",
            "timestamp_granularities",
        )
    return TranscriptionRequest(
        audio=audio,
        prompt=string(fields, "prompt"),
        response_format=fmt,
        temperature=temperature,
        words="word" in granularities,
        segments=not granularities or "segment" in granularities,
    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _numeric(fields: dict[str, Any], name: str) -> dict[str, Any]:
    """Multipart sends numbers as text: ``{name: float}`` when it parses, else the raw field."""
    value = fields.get(name)
    if isinstance(value, str):
        try:
            return {name: float(value)}
        except ValueError:
            return {name: value}
    return {name: value}
