"""``/v1/chat/completions``: request validation → prompt + sampling params, and response shapes."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from .chat_model import ChatModel
from .engine import Delta, Finished, TokenLogprob
from .errors import APIError, invalid
from .sampling import SamplingParams
from .validation import boolean, integer, number, reject_unknown, zero_only

_T = TypeVar("_T")

SYSTEM_FINGERPRINT = "fp_infrai_gpu_backend"
MAX_N = 8
MAX_STOP = 4

KNOWN_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "top_k",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "stop",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "user",
        "metadata",
        "store",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "modalities",
    }
)
RESPONSE_FORMAT_TYPES = frozenset({"text", "json_object", "json_schema"})
UNSUPPORTED_PART_TYPES = {"image_url": "image", "input_audio": "audio", "file": "file"}


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat request: the templated prompt and one ``SamplingParams`` per choice."""

    model: str
    prompt_ids: list[int]
    choices: list[SamplingParams]
    stream: bool
    include_usage: bool
    logprobs: bool


def _message_text(message: dict[str, Any], index: int) -> str:
    """The text of one message (a string or a list of text parts)."""
    content = message.get("content")
    param = f"messages[{index}].content"
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(
            f"Invalid type for '{param}': expected a string or an array of parts.",
            param,
            "invalid_type",
        )
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in UNSUPPORTED_PART_TYPES:
            raise invalid(
                f"This model does not accept {UNSUPPORTED_PART_TYPES[kind]} inputs.",
                param,
                "unsupported_content",
            )
        else:
            raise invalid(f"Invalid content part in '{param}'.", param)
    return "\n".join(texts)


def parse_messages(raw: Any) -> list[dict[str, str]]:
    """OpenAI messages → ``[{"role", "content"}]`` for the template (``developer`` → system)."""
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array.", "messages")
    messages = []
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise invalid(
                f"Invalid type for 'messages[{index}]': expected an object.", f"messages[{index}]"
            )
        role = message.get("role")
        if role in {"tool", "function"} or message.get("tool_calls"):
            raise invalid(
                "This model does not support tool calls.",
                f"messages[{index}]",
                "unsupported_parameter",
            )
        if role not in {"system", "developer", "user", "assistant"}:
            raise invalid(
                f"Invalid value for 'messages[{index}].role': {role!r}.", f"messages[{index}].role"
            )
        mapped = "system" if role == "developer" else role
        messages.append({"role": mapped, "content": _message_text(message, index)})
    return messages


def _reject_unsupported_features(body: dict[str, Any]) -> None:
    """400 for tools, function calling and non-text output (the model cannot honour them)."""
    for name in ("tools", "functions"):
        if body.get(name):
            raise invalid("This model does not support tools.", name, "unsupported_parameter")
    fmt = body.get("response_format")
    # json_object / json_schema are accepted with no effect (output is not constrained); the
    # catalog marks response_format "no effect" so the gateway tells the caller.
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") in RESPONSE_FORMAT_TYPES):
        raise invalid(
            "Invalid 'response_format': expected {'type': 'text' | 'json_object' | 'json_schema'}.",
            "response_format",
        )
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise invalid("This model produces text only.", "modalities", "unsupported_parameter")


def parse_stop(raw: Any) -> tuple[str, ...]:
    """``stop``: a string or up to 4 strings."""
    if raw is None:
        return ()
    stops = [raw] if isinstance(raw, str) else raw
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid(
            "Invalid type for 'stop': expected a string or an array of strings.",
            "stop",
            "invalid_type",
        )
    if len(stops) > MAX_STOP:
        raise invalid(f"Invalid 'stop': at most {MAX_STOP} sequences are allowed.", "stop")
    return tuple(s for s in stops if s)


def parse_logit_bias(raw: Any, vocab_size: int) -> dict[int, float]:
    """``logit_bias``: token id (as a string key) → bias in [-100, 100]."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid(
            "Invalid type for 'logit_bias': expected an object.", "logit_bias", "invalid_type"
        )
    bias = {}
    for key, value in raw.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            raise invalid(
                f"Invalid key in 'logit_bias': {key!r} is not a token id.", "logit_bias"
            ) from None
        if not 0 <= token_id < vocab_size:
            raise invalid(
                f"Invalid key in 'logit_bias': token id {token_id} is out of range.", "logit_bias"
            )
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not -100 <= value <= 100
        ):
            raise invalid(
                "Invalid value in 'logit_bias': biases must be between -100 and 100.", "logit_bias"
            )
        bias[token_id] = float(value)
    return bias


def template_prompt(chat: ChatModel, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the conversation through the model's chat template, ready to generate."""
    encoded: Any = chat.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True
    )
    ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
    return [int(i) for i in ids]


def _max_tokens(body: dict[str, Any], prompt_tokens: int, context: int, default: int) -> int:
    """``max_completion_tokens`` (or legacy ``max_tokens``), checked against the context window;
    absent → ``default`` (the model's default output limit) or what the context has left, if
    less."""
    name = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    requested = integer(body, name, 1, 1 << 30)
    if prompt_tokens >= context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens. However, your messages "
            f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
            param="messages",
        )
    if requested is None:
        return min(default, context - prompt_tokens)
    if prompt_tokens + requested > context:
        raise APIError(
            400,
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt_tokens + requested} tokens ({prompt_tokens} in the messages, "
            f"{requested} in the completion). "
            "Please reduce the length of the messages or completion.",
            code="context_length_exceeded",
            param=name,
        )
    return requested


def _present(value: _T | None) -> _T:
    """``value`` of a field read with a default (never None)."""
    assert value is not None
    return value


def parse_chat_request(body: dict[str, Any], model_id: str, chat: ChatModel) -> ChatRequest:
    """Validate a chat body (OpenAI schema + the platform's parameter rules) for ``chat``."""
    reject_unknown(body, KNOWN_FIELDS)
    _reject_unsupported_features(body)
    zero_only(body, "presence_penalty")
    zero_only(body, "frequency_penalty")
    stream = boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    logprobs = boolean(body, "logprobs")
    top_logprobs = integer(body, "top_logprobs", 0, 20)
    if top_logprobs is not None and not logprobs:
        raise invalid("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs")
    prompt_ids = template_prompt(chat, parse_messages(body.get("messages")))
    seed = integer(body, "seed", -(1 << 63), (1 << 63) - 1)
    n = integer(body, "n", 1, MAX_N, default=1)
    assert n is not None
    base = SamplingParams(
        max_tokens=_max_tokens(body, len(prompt_ids), chat.context_length, chat.default_max_tokens),
        temperature=number(body, "temperature", 0.0, 2.0),
        top_p=_present(number(body, "top_p", 0.0, 1.0, default=1.0)),
        top_k=_present(integer(body, "top_k", 0, 1 << 20, default=0)),
        repetition_penalty=_present(number(body, "repetition_penalty", 1.0, 2.0, default=1.0)),
        seed=seed,
        stop=parse_stop(body.get("stop")),
        logit_bias=parse_logit_bias(body.get("logit_bias"), chat.vocab_size),
        top_logprobs=(top_logprobs or 0) if logprobs else None,
    )
    choices = [
        base if seed is None or i == 0 else SamplingParams(**{**base.__dict__, "seed": seed + i})
        for i in range(n)
    ]
    return ChatRequest(model_id, prompt_ids, choices, stream, include_usage, logprobs)


# --- response shapes ------------------------------------------------------------------------------


def completion_id() -> str:
    """A fresh ``chatcmpl-…`` id."""
    return "chatcmpl-" + secrets.token_hex(12)


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """OpenAI's usage object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def logprobs_body(entries: list[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's ``choices[].logprobs`` object."""
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": e.bytes,
                "top_logprobs": [t.__dict__ for t in e.top_logprobs],
            }
            for e in entries
        ],
        "refusal": None,
    }


@dataclass
class ChoiceResult:
    """What one choice produced, accumulated from engine events."""

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int = 0
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None

    def add(self, event: Delta | Finished) -> None:
        """Fold one engine event into the result."""
        if isinstance(event, Delta):
            self.text += event.text
            if self.logprobs is not None:
                self.logprobs.extend(event.logprobs)
        else:
            self.finish_reason = event.reason
            self.completion_tokens = event.completion_tokens
            self.error = event.error


def completion_body(
    request_id: str, created: int, request: ChatRequest, results: list[ChoiceResult]
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": request.model,
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": r.text,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": logprobs_body(r.logprobs) if r.logprobs is not None else None,
                "finish_reason": r.finish_reason,
            }
            for i, r in enumerate(results)
        ],
        "usage": usage_body(len(request.prompt_ids), sum(r.completion_tokens for r in results)),
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }


def chunk_body(
    request_id: str,
    created: int,
    request: ChatRequest,
    choices: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (``usage`` key present only with ``include_usage``)."""
    body: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": request.model,
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
    }
    if request.include_usage:
        body["usage"] = usage
    return body


def delta_choice(
    index: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    logprobs: list[TokenLogprob] | None = None,
) -> dict[str, Any]:
    """One entry of a chunk's ``choices``."""
    return {
        "index": index,
        "delta": delta,
        "logprobs": logprobs_body(logprobs) if logprobs is not None else None,
        "finish_reason": finish_reason,
    }


def now() -> int:
    """Unix seconds for ``created``."""
    return int(time.time())
