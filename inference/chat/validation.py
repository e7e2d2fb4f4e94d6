"""The chat request: OpenAI's schema plus the platform's parameter rules.

:func:`parse_chat_request` either returns a :class:`ChatRequest` or raises
:class:`~config.errors.InvalidRequest` with ``param`` naming the field (``messages[2].content``)
— before any vendor is called or any money held. The rules of
``spec/infercom-openai-compatibility.md`` are enforced here, with its exact texts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from config.errors import InvalidRequest, invalid_type, missing_param
from inference import tokens
from inference.validation import (
    EXTENSIONS,
    check_routing_fields,
    invalid_choice,
    is_int,
    is_number,
    number,
    positive_int,
)

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
_INT64 = (-(2**63), 2**63 - 1)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# OpenAI request fields we accept and forward as they are.
_PASSTHROUGH = {
    "model",
    "messages",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "top_k",
    "repetition_penalty",
}
# vLLM's (and SGLang's) own sampling and guided-decoding fields, forwarded as they are. Each is
# also a catalog capability of the same name: only models whose entry lists it are routed to, so
# a vendor that would refuse or ignore the field never sees it.
VLLM_EXTRAS = ("min_p", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
_GUIDED = VLLM_EXTRAS[1:]
# OpenAI fields that are accepted and not forwarded (they do not change the completion here).
_ACCEPTED_NOT_FORWARDED = {
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "reasoning_effort",
    "verbosity",
    "modalities",
    "prediction",
    "web_search_options",
}
# Legacy function calling, translated to tools / tool_choice before validation.
_LEGACY = {"functions", "function_call"}
# The platform's own fields (sent through extra_body): every endpoint's, and chat's ``cache``
# (``false``: never answer from the response cache; the other endpoints take no such opt-out).
_EXTENSIONS = {*EXTENSIONS, "cache"}
_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
_VERBOSITIES = ("low", "medium", "high")

PENALTY_MESSAGE = (
    "Invalid value for '{name}': {value}. This deployment does not implement '{name}', so only 0 "
    "is accepted. Use 'repetition_penalty' to penalize repetition."
)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated chat request and what routing, billing and caching need to know of it.

    ``prompt_tokens``: the prompt's tokens by our count (cl100k_base: messages and tool
    definitions), for the context-window check in routing (``RoutingRequest.prompt_tokens``).
    ``max_output_tokens``: the cap the caller set (``max_completion_tokens`` or ``max_tokens``;
    ``None``: none) and ``max_output_param`` the field that set it. ``legacy_functions``: the
    caller used ``functions`` / ``function_call`` (translated to tools); its answer should carry
    ``function_call`` (see :func:`to_legacy_function_call`).
    """

    payload: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    capabilities: frozenset[str]
    params: dict[str, Any]
    max_output_tokens: int | None
    n: int
    task: str | None
    prefer: str | None
    cache_allowed: bool
    prompt_tokens_upper: int
    prompt_tokens_likely: int
    prompt_tokens: int = 0
    max_output_param: str = "max_tokens"
    legacy_functions: bool = False

    @property
    def deterministic(self) -> bool:
        """Temperature 0 or a seed: the same request may be answered from the cache."""
        return self.payload.get("temperature") == 0 or self.payload.get("seed") is not None


def _check_penalties(data: dict[str, Any]) -> None:
    for name in ("presence_penalty", "frequency_penalty"):
        value = data.get(name)
        if value is None:
            continue
        if not is_number(value):
            raise invalid_type(name, "a number")
        if value != 0:
            raise InvalidRequest(
                PENALTY_MESSAGE.format(name=name, value=json.dumps(value)), param=name
            )


def _check_image_url(url: Any, param: str) -> None:
    if not isinstance(url, str) or not url:
        raise invalid_type(param, "a URL string")
    if url.startswith("data:"):
        header, sep, data = url.partition(",")
        if not sep or not header.startswith("data:image/") or ";base64" not in header or not data:
            raise InvalidRequest(
                "Invalid image data URL: expected 'data:image/<type>;base64,<data>'.",
                code="invalid_image_url",
                param=param,
            )
    elif not url.startswith(("http://", "https://")):
        raise InvalidRequest(
            "Invalid image URL: use an http(s) URL or a base64 data URL.",
            code="invalid_image_url",
            param=param,
        )


def _text_bytes(content: Any) -> int:
    if isinstance(content, str):
        return len(content.encode())
    if isinstance(content, list):
        return sum(len(str(p.get("text", "")).encode()) for p in content if isinstance(p, dict))
    return 0


def _check_parts(parts: list[Any], role: str, param: str) -> bool:
    """Validate a content array; True when it holds an image."""
    allowed = {"text", "image_url"} if role == "user" else {"text", "refusal"}
    has_image = False
    for j, part in enumerate(parts):
        p = f"{param}[{j}]"
        if not isinstance(part, dict):
            raise invalid_type(p, "an object")
        kind = part.get("type")
        if kind not in allowed:
            raise InvalidRequest(
                f"Invalid content part type {json.dumps(kind)} for role '{role}'; "
                f"expected one of {sorted(allowed)}.",
                param=f"{p}.type",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            raise invalid_type(f"{p}.text", "a string")
        if kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict):
                raise invalid_type(f"{p}.image_url", "an object")
            _check_image_url(image.get("url"), f"{p}.image_url.url")
            if image.get("detail", "auto") not in ("auto", "low", "high"):
                raise InvalidRequest(
                    "Invalid value for 'detail': use auto, low or high.",
                    param=f"{p}.image_url.detail",
                )
            has_image = True
    return has_image


def _check_tool_calls(calls: Any, param: str) -> None:
    if not isinstance(calls, list):
        raise invalid_type(param, "an array")
    for j, call in enumerate(calls):
        p = f"{param}[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            raise invalid_type(f"{p}.id", "a string")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_type(f"{p}.function.name", "a string")
        if not isinstance(function.get("arguments", ""), str):
            raise invalid_type(f"{p}.function.arguments", "a JSON string")


def _check_messages(messages: Any) -> tuple[bool, int, int]:
    """Validate ``messages``; returns (has_image, prompt bytes, message count)."""
    if messages is None:
        raise missing_param("messages")
    if not isinstance(messages, list):
        raise invalid_type("messages", "an array")
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message.", param="messages")
    has_image = False
    size = 0
    for i, message in enumerate(messages):
        p = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid_type(p, "an object")
        role = message.get("role")
        if role is None:
            raise missing_param(f"{p}.role")
        if role not in ROLES:
            raise InvalidRequest(
                f"Invalid value for 'role': {json.dumps(role)}. Supported roles are "
                "'system', 'developer', 'user', 'assistant' and 'tool'.",
                param=f"{p}.role",
            )
        content = message.get("content")
        if content is None:
            if not (role == "assistant" and (message.get("tool_calls") or message.get("refusal"))):
                raise missing_param(f"{p}.content")
        elif isinstance(content, list):
            has_image |= _check_parts(content, role, f"{p}.content")
        elif not isinstance(content, str):
            raise invalid_type(f"{p}.content", "a string or an array of content parts")
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise missing_param(f"{p}.tool_call_id")
        if role == "assistant" and message.get("tool_calls") is not None:
            _check_tool_calls(message["tool_calls"], f"{p}.tool_calls")
            size += sum(len(json.dumps(c).encode()) for c in message["tool_calls"])
        if "name" in message and not isinstance(message["name"], str):
            raise invalid_type(f"{p}.name", "a string")
        size += _text_bytes(content)
    return has_image, size, len(messages)


def _check_tools(data: dict[str, Any]) -> list[str]:
    tools = data.get("tools")
    if tools is None:
        if data.get("tool_choice") not in (None, "none", "auto"):
            raise InvalidRequest(
                "'tool_choice' is only allowed when 'tools' are specified.", param="tool_choice"
            )
        return []
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array")
    names = []
    for i, tool in enumerate(tools):
        p = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidRequest(
                "Each tool must be {'type': 'function', 'function': {...}}.", param=f"{p}.type"
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise missing_param(f"{p}.function")
        name = function.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise InvalidRequest(
                "Invalid tool name: use 1-64 letters, digits, '_' or '-'.",
                param=f"{p}.function.name",
            )
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise invalid_type(f"{p}.function.parameters", "a JSON Schema object")
        names.append(name)
    choice = data.get("tool_choice")
    if choice is not None:
        if isinstance(choice, str):
            if choice not in ("none", "auto", "required"):
                raise InvalidRequest(
                    "Invalid value for 'tool_choice': use 'none', 'auto', 'required' or a "
                    "named function.",
                    param="tool_choice",
                )
        elif isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            if name not in names:
                raise InvalidRequest(
                    f"tool_choice names the function {json.dumps(name)}, which is not in 'tools'.",
                    param="tool_choice",
                )
        else:
            raise invalid_type("tool_choice", "a string or an object")
    if data.get("parallel_tool_calls") is not None and not isinstance(
        data["parallel_tool_calls"], bool
    ):
        raise invalid_type("parallel_tool_calls", "a boolean")
    return names


def _check_response_format(data: dict[str, Any]) -> bool:
    fmt = data.get("response_format")
    if fmt is None:
        return False
    if not isinstance(fmt, dict):
        raise invalid_type("response_format", "an object")
    kind = fmt.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise InvalidRequest(
            "Invalid value for 'response_format.type': use 'text', 'json_object' or 'json_schema'.",
            param="response_format.type",
        )
    if kind == "json_schema":
        schema = fmt.get("json_schema")
        if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
            raise missing_param("response_format.json_schema.name")
        if "schema" in schema and not isinstance(schema["schema"], dict):
            raise invalid_type("response_format.json_schema.schema", "an object")
    return kind != "text"


def _check_misc(data: dict[str, Any]) -> None:
    for name in ("stream", "logprobs"):
        if data.get(name) is not None and not isinstance(data[name], bool):
            raise invalid_type(name, "a boolean")
    stream_options = data.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise invalid_type("stream_options", "an object")
        if not data.get("stream"):
            raise InvalidRequest(
                "'stream_options' is only allowed when 'stream' is true.", param="stream_options"
            )
    stop = data.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise invalid_type("stop", "a string or an array of strings")
        if len(stops) > 4:
            raise InvalidRequest("'stop' takes at most 4 sequences.", param="stop")
    if data.get("seed") is not None:
        if not is_int(data["seed"]):
            raise invalid_type("seed", "an integer")
        if not _INT64[0] <= data["seed"] <= _INT64[1]:
            raise InvalidRequest(
                f"Invalid 'seed': {data['seed']} is outside the 64-bit integer range.", param="seed"
            )
    top_logprobs = data.get("top_logprobs")
    if top_logprobs is not None:
        if not is_int(top_logprobs) or not 0 <= top_logprobs <= 20:
            raise InvalidRequest(
                "'top_logprobs' must be an integer between 0 and 20.", param="top_logprobs"
            )
        if not data.get("logprobs"):
            raise InvalidRequest(
                "'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs"
            )
    bias = data.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict):
            raise invalid_type("logit_bias", "an object mapping token ids to numbers")
        for token, value in bias.items():
            if not str(token).isdigit() or not is_number(value) or not -100 <= value <= 100:
                raise InvalidRequest(
                    "'logit_bias' maps token ids to numbers between -100 and 100.",
                    param="logit_bias",
                )
    if data.get("user") is not None and not isinstance(data["user"], str):
        raise invalid_type("user", "a string")
    check_routing_fields(data)
    if data.get("cache") is not None and not isinstance(data["cache"], bool):
        raise invalid_type("cache", "a boolean")
    _check_accepted_extras(data)


def _check_vllm_extras(data: dict[str, Any]) -> set[str]:
    """Type and range of vLLM's extra fields (see :data:`VLLM_EXTRAS`); returns the ones set,
    which are the capabilities the request needs. At most one guided-decoding field, as vLLM."""
    number(data, "min_p", 0, 1)
    guided = [name for name in _GUIDED if data.get(name) is not None]
    if len(guided) > 1:
        raise InvalidRequest(
            f"Use one kind of guided decoding, not both '{guided[0]}' and '{guided[1]}'.",
            param=guided[1],
        )
    schema = data.get("guided_json")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            schema = None
    if data.get("guided_json") is not None and not isinstance(schema, dict):
        raise invalid_type("guided_json", "a JSON schema (an object, or a string holding one)")
    for name in ("guided_regex", "guided_grammar"):
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or not value):
            raise invalid_type(name, "a non-empty string")
    choices = data.get("guided_choice")
    if choices is not None and (
        not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices)
    ):
        raise invalid_type("guided_choice", "a non-empty array of strings")
    return {name for name in VLLM_EXTRAS if data.get(name) is not None}


def _check_accepted_extras(data: dict[str, Any]) -> None:
    """OpenAI fields accepted as OpenAI accepts them, though they change nothing here."""
    for name, allowed in (("reasoning_effort", _REASONING_EFFORTS), ("verbosity", _VERBOSITIES)):
        value = data.get(name)
        if value is not None and value not in allowed:
            raise invalid_choice(name, value, allowed)
    modalities = data.get("modalities")
    if modalities is not None:
        if not isinstance(modalities, list) or not all(isinstance(m, str) for m in modalities):
            raise invalid_type("modalities", "an array of strings")
        unsupported = [m for m in modalities if m != "text"]
        if unsupported:
            raise InvalidRequest(
                f"Invalid value for 'modalities': {json.dumps(unsupported[0])}. Only 'text' output "
                "is supported.",
                code="unsupported_value",
                param="modalities",
            )
    prediction = data.get("prediction")
    if prediction is not None:
        if not isinstance(prediction, dict) or prediction.get("type") != "content":
            raise InvalidRequest(
                "Invalid value for 'prediction': expected {'type': 'content', 'content': ...}.",
                param="prediction",
            )
        if not isinstance(prediction.get("content"), str | list):
            raise invalid_type("prediction.content", "a string or an array of text parts")
    if data.get("web_search_options") is not None and not isinstance(
        data["web_search_options"], dict
    ):
        raise invalid_type("web_search_options", "an object")


def _legacy_functions(data: dict[str, Any]) -> dict[str, Any]:
    """``functions`` / ``function_call`` (OpenAI's deprecated function calling) as ``tools`` /
    ``tool_choice``; 400 when both styles are mixed or the shapes are wrong."""
    functions = data.get("functions")
    call = data.get("function_call")
    if functions is None and call is None:
        return data
    if data.get("tools") is not None or data.get("tool_choice") is not None:
        raise InvalidRequest(
            "Use either 'tools' / 'tool_choice' or the legacy 'functions' / 'function_call', "
            "not both.",
            param="functions" if functions is not None else "function_call",
        )
    out = {k: v for k, v in data.items() if k not in _LEGACY}
    if functions is not None:
        if not isinstance(functions, list):
            raise invalid_type("functions", "an array")
        for i, function in enumerate(functions):
            if not isinstance(function, dict):
                raise invalid_type(f"functions[{i}]", "an object")
        out["tools"] = [{"type": "function", "function": f} for f in functions]
    if call is not None:
        if isinstance(call, str):
            out["tool_choice"] = call
        elif isinstance(call, dict) and isinstance(call.get("name"), str):
            out["tool_choice"] = {"type": "function", "function": {"name": call["name"]}}
        else:
            raise invalid_type("function_call", "'none', 'auto' or {'name': ...}")
    return out


def _legacy_param(param: str | None) -> str | None:
    """A field of the translated request named as the caller wrote it."""
    if param is None:
        return None
    if param.startswith("tools["):
        head, _, rest = param.partition("]")
        rest = rest.removeprefix(".function").removeprefix(".type")
        return "functions" + head.removeprefix("tools") + "]" + rest
    if param == "tool_choice":
        return "function_call"
    return param


def to_legacy_function_call(body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (or chunk) for a caller that used ``functions``: each choice's first
    tool call as OpenAI's legacy ``function_call`` (finish reason ``function_call``)."""
    for choice in body.get("choices") or []:
        for key in ("message", "delta"):
            message = choice.get(key)
            if not isinstance(message, dict) or not message.get("tool_calls"):
                continue
            function = message.pop("tool_calls")[0].get("function") or {}
            message["function_call"] = {
                k: function[k] for k in ("name", "arguments") if function.get(k) is not None
            }
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "function_call"
    return body


def _used_params(data: dict[str, Any]) -> dict[str, Any]:
    """The matrix parameters this request really sets (absent, null and 0 penalties are not)."""
    used: dict[str, Any] = {}
    for name in (
        "n",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "seed",
        "repetition_penalty",
        "top_k",
        "tools",
        "response_format",
        "stop",
        "temperature",
        "top_p",
        "reasoning_effort",
        "verbosity",
        "prediction",
        "web_search_options",
    ):
        value = data.get(name)
        if value is None or value is False or value == [] or value == {}:
            continue
        used[name] = value
    return used


def parse_chat_request(data: dict[str, Any]) -> ChatRequest:
    """Validate a chat request body (already JSON-decoded). See the module docstring."""
    legacy = bool(set(data) & _LEGACY)
    try:
        return _parse(_legacy_functions(data), legacy=legacy)
    except InvalidRequest as exc:
        if legacy:
            exc.param = _legacy_param(exc.param)
        raise


def _parse(data: dict[str, Any], *, legacy: bool) -> ChatRequest:
    known = _PASSTHROUGH | _ACCEPTED_NOT_FORWARDED | _EXTENSIONS | set(VLLM_EXTRAS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {unknown[0]}",
            code="unknown_parameter",
            param=unknown[0],
        )
    model = data.get("model", "auto")
    if not isinstance(model, str) or not model:
        raise invalid_type("model", "a non-empty string")
    has_image, prompt_bytes, message_count = _check_messages(data.get("messages"))
    _check_penalties(data)
    number(data, "temperature", 0, 2)
    number(data, "top_p", 0, 1)
    number(data, "repetition_penalty", 1, 2)
    positive_int(data, "top_k")
    positive_int(data, "n", 128)
    positive_int(data, "max_tokens")
    positive_int(data, "max_completion_tokens")
    tool_names = _check_tools(data)
    json_mode = _check_response_format(data)
    _check_misc(data)
    extras = _check_vllm_extras(data)

    capabilities = {"chat", *extras}
    if has_image:
        capabilities.add("vision")
    if tool_names:
        capabilities.add("tools")
    if json_mode:
        capabilities.add("json_mode")
    payload = {
        k: v for k, v in data.items() if (k in _PASSTHROUGH or k in extras) and v is not None
    }
    # 0 penalties are accepted and mean "off": never forward them.
    payload.pop("presence_penalty", None)
    payload.pop("frequency_penalty", None)
    stream = bool(data.get("stream"))
    images = sum(
        1
        for m in data["messages"]
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    )
    tools_json = json.dumps(data.get("tools") or [])
    tools_bytes = len(tools_json.encode())
    # Two prompt-token figures made before the serving model (and its tokenizer) is known:
    # - ``upper`` sizes the hold, and the charge may never exceed the hold, so it is a bound for
    #   any model: a token covers at least one byte of text, so never more tokens than the UTF-8
    #   bytes of the messages and tools; plus 16 per message (role, chat-template separators),
    #   2000 per image (OpenAI's high detail counts at most 1,445 for one, Anthropic about
    #   1,600) and 16 for the reply's opening.
    # - ``prompt_tokens_likely`` feeds the rate limit's tokens per minute and routing's expected
    #   cost, where a bound would throttle callers and misprice: about 4 bytes per token, 4 per
    #   message as OpenAI counts them, 765 per image (``inference.tokens.IMAGE_TOKENS``).
    upper = prompt_bytes + tools_bytes + 16 * message_count + 2000 * images + 16
    counted = tokens.count_messages(data["messages"]) + (
        tokens.count_text(tools_json) if data.get("tools") else 0
    )
    return ChatRequest(
        payload=payload,
        model=model,
        stream=stream,
        include_usage=bool((data.get("stream_options") or {}).get("include_usage")),
        capabilities=frozenset(capabilities),
        params=_used_params(data),
        max_output_tokens=data.get("max_completion_tokens") or data.get("max_tokens"),
        n=int(data.get("n") or 1),
        task=data.get("task"),
        prefer=data.get("prefer"),
        cache_allowed=data.get("cache", True) is not False,
        prompt_tokens_upper=upper,
        prompt_tokens_likely=(
            (prompt_bytes + tools_bytes) // 4 + 4 * message_count + tokens.IMAGE_TOKENS * images
        ),
        prompt_tokens=counted,
        max_output_param=(
            "max_completion_tokens" if data.get("max_completion_tokens") else "max_tokens"
        ),
        legacy_functions=legacy,
    )
