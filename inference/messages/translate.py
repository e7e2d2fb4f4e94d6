"""``/v1/messages`` (Anthropic's Messages API) requests as chat requests, as pure functions.

:func:`parse_messages_request` validates a Messages request against Anthropic's accepted fields
(:data:`FIELDS`, the one list) and maps it onto a chat request validated by the chat rules
(:func:`inference.chat.validation.parse_chat_request`: the same 400s), a refusal's ``param``
named as the Messages request spells it; it keeps the request as it came for vendors that speak
Anthropic's wire format. The answers' shapes are :mod:`inference.messages.answers`.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

from config.errors import InvalidRequest, invalid_type, missing_param
from inference.chat.validation import ChatRequest, parse_chat_request
from inference.validation import EXTENSIONS, is_int, is_number
from inference.vendors.base import JSON


class Handling(enum.Enum):
    """What infrai does with a Messages request field."""

    TRANSLATED = "translated"  # mapped onto the chat request
    IGNORED = "ignored"  # accepted, not forwarded, reported in ``ignored_params``


# Every field of Anthropic's ``POST /v1/messages`` request body (its API reference and the
# official SDK's ``MessageCreateParams``), and what infrai does with it. A field not listed is
# refused as Anthropic refuses it (400 ``invalid_request_error``, "Extra inputs are not
# permitted"). ``COUNT_TOKENS`` says which of them ``/v1/messages/count_tokens`` takes.
FIELDS: dict[str, Handling] = {
    "model": Handling.TRANSLATED,
    "messages": Handling.TRANSLATED,
    "max_tokens": Handling.TRANSLATED,
    "system": Handling.TRANSLATED,
    "stop_sequences": Handling.TRANSLATED,
    "stream": Handling.TRANSLATED,
    "temperature": Handling.TRANSLATED,
    "top_p": Handling.TRANSLATED,
    "top_k": Handling.TRANSLATED,
    "tools": Handling.TRANSLATED,
    "tool_choice": Handling.TRANSLATED,
    "metadata": Handling.TRANSLATED,  # metadata.user_id → chat's ``user``
    "thinking": Handling.IGNORED,
    "cache_control": Handling.IGNORED,
    "service_tier": Handling.IGNORED,
    "container": Handling.IGNORED,
    "mcp_servers": Handling.IGNORED,
    "context_management": Handling.IGNORED,
    "output_config": Handling.IGNORED,
    "output_format": Handling.IGNORED,
    "inference_geo": Handling.IGNORED,
    "speed": Handling.IGNORED,
    "diagnostics": Handling.IGNORED,
    "user_profile_id": Handling.IGNORED,
    "workspace_id": Handling.IGNORED,
}
COUNT_TOKENS = frozenset(FIELDS) - {
    "max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k", "metadata",
    "service_tier", "container", "inference_geo", "diagnostics",
}  # fmt: skip
# The platform's own fields (sent through the SDK's ``extra_body``): chat's, ``cache`` included.
_EXTENSIONS = (*EXTENSIONS, "cache")

# The request headers an Anthropic-format vendor is sent as the caller gave them.
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A validated Messages request: the chat request it becomes (for chat vendors), the
    accepted fields that translation does not forward, where each chat message came from (for
    naming a refusal's field), and — for Anthropic-format vendors, which are sent the request as
    it is — that request (without infrai's own fields), its :data:`FORWARDED_HEADERS`, and a
    bound on the prompt tokens of what translation leaves out (thinking blocks)."""

    chat: ChatRequest
    ignored: tuple[str, ...]
    origins: tuple[str, ...] = ()
    native: JSON = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    untranslated_tokens_upper: int = 0
    # Part of the prompt carries ``cache_control``: a native vendor may write it to its cache
    # (the hold then covers cache-write prices; :func:`money.pricing.worst_case_usage`).
    caches_prompt: bool = False

    def param(self, param: str | None) -> str | None:
        """A chat request field (as a refusal names it) as the Messages request spells it."""
        return messages_param(param, self.origins)


def messages_param(param: str | None, origins: tuple[str, ...] = ()) -> str | None:
    """``param`` of the chat request named as the Messages request spells it: a chat message
    as the Messages field it came from (``origins``), ``tools[i].function.parameters`` as
    ``tools[i].input_schema``, ``stop`` as ``stop_sequences``, ``user`` as
    ``metadata.user_id``."""
    if param is None:
        return None
    match = re.match(r"^messages\[(\d+)\]", param)
    if match:
        index = int(match[1])
        return origins[index] if index < len(origins) else "messages"
    match = re.match(r"^tools\[(\d+)\]\.function\.(.*)$", param)
    if match:
        rest = re.sub(r"^parameters", "input_schema", match[2])
        return f"tools[{match[1]}].{rest}"
    renames = {
        "stop": "stop_sequences",
        "user": "metadata.user_id",
        "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
    }
    head, sep, rest = param.partition(".")
    return renames.get(head, head) + sep + rest


# --- the request ------------------------------------------------------------------------------
def _refuse(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value", param=param)


def _text(block: JSON, param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid_type(f"{param}.text", "a string")
    return text


def _image_url(block: JSON, param: str) -> str:
    source = block.get("source")
    if not isinstance(source, dict):
        raise missing_param(f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise invalid_type(f"{param}.source", "a base64 source with media_type and data")
        return f"data:{media_type};base64,{data}"
    if kind == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise _refuse(
        f"Unsupported image source type {json.dumps(kind)}; use base64 or url.",
        f"{param}.source.type",
    )


def _blocks(content: Any, param: str) -> list[JSON]:
    """A message's content as a list of block objects (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid_type(param, "a string or an array of content blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            raise invalid_type(f"{param}[{j}]", "an object")
    return content


def _tool_result(block: JSON, param: str) -> tuple[JSON, list[JSON]]:
    """A ``tool_result`` block as a chat ``tool`` message, and its images (which a tool
    message cannot carry) as user content parts."""
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str):
        raise missing_param(f"{param}.tool_use_id")
    content = block.get("content", "")
    texts: list[str] = []
    images: list[JSON] = []
    for j, part in enumerate(_blocks(content, f"{param}.content")):
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part, f"{param}.content[{j}]"))
        elif kind == "image":
            url = _image_url(part, f"{param}.content[{j}]")
            images.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise _refuse(
                f"Unsupported tool_result content type {json.dumps(kind)}; use text or image.",
                f"{param}.content[{j}].type",
            )
    return {"role": "tool", "tool_call_id": tool_use_id, "content": "".join(texts)}, images


def _user_messages(content: Any, param: str) -> list[JSON]:
    """A user turn as chat messages: its tool results as ``tool`` messages first (in order,
    as the chat API needs them right after the assistant's calls), then its text and images."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tools: list[JSON] = []
    parts: list[JSON] = []
    for j, block in enumerate(_blocks(content, param)):
        p = f"{param}[{j}]"
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, p)})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, p)}})
        elif kind == "tool_result":
            message, images = _tool_result(block, p)
            tools.append(message)
            parts.extend(images)
        else:
            raise _refuse(
                f"Unsupported content block type {json.dumps(kind)} in a user message; use "
                "text, image or tool_result.",
                f"{p}.type",
            )
    return [*tools, *([{"role": "user", "content": parts}] if parts else [])]


def _untranslated_bytes(messages: Any) -> int:
    """The UTF-8 bytes of the assistant ``thinking`` blocks (a token covers at least one)."""
    return sum(
        len(json.dumps(block, ensure_ascii=False).encode())
        for message in messages if isinstance(message, dict)
        and message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")
    )  # fmt: skip


def _assistant_message(content: Any, param: str) -> JSON | None:
    """An assistant turn as one chat message (text and tool calls; thinking blocks are the
    model's own and are not sent to a chat model), ``None`` when nothing of it remains."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[JSON] = []
    for j, block in enumerate(_blocks(content, param)):
        p = f"{param}[{j}]"
        kind = block.get("type")
        if kind == "text":
            texts.append(_text(block, p))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise invalid_type(p, "a tool_use block with a string id and name")
            arguments = json.dumps(block.get("input") or {})
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
        elif kind not in ("thinking", "redacted_thinking"):
            raise _refuse(
                f"Unsupported content block type {json.dumps(kind)} in an assistant message; "
                "use text, tool_use or thinking.",
                f"{p}.type",
            )
    if not texts and not calls:
        return None
    message: JSON = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _system(system: Any) -> str | None:
    if system is None:
        return None
    if isinstance(system, str):
        return system
    blocks = _blocks(system, "system")
    return "\n\n".join(_text(b, f"system[{j}]") for j, b in enumerate(blocks))


def _messages(data: JSON) -> tuple[list[JSON], list[str]]:
    """The chat messages of ``system`` and ``messages``, and each one's Messages field."""
    out: list[JSON] = []
    origins: list[str] = []
    system = _system(data.get("system"))
    if system:
        out.append({"role": "system", "content": system})
        origins.append("system")
    raw = data.get("messages")
    if raw is None:
        raise missing_param("messages")
    if not isinstance(raw, list) or not raw:
        raise invalid_type("messages", "a non-empty array of messages")
    for i, message in enumerate(raw):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid_type(param, "an object")
        role, content = message.get("role"), message.get("content")
        if content is None:
            raise missing_param(f"{param}.content")
        if role == "user":
            turn = _user_messages(content, f"{param}.content")
        elif role == "assistant":
            one = _assistant_message(content, f"{param}.content")
            turn = [one] if one is not None else []
        else:
            raise _refuse(
                f"Invalid value for 'role': {json.dumps(role)}. Use 'user' or 'assistant'.",
                f"{param}.role",
            )
        out.extend(turn)
        origins.extend([param] * len(turn))
    return out, origins


def _tools(tools: Any) -> list[JSON] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array")
    out: list[JSON] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise invalid_type(f"tools[{i}]", "an object")
        kind = tool.get("type", "custom")
        if kind not in (None, "custom"):
            raise InvalidRequest(
                f"Server tool {json.dumps(kind)} is not supported; define client tools "
                "(name, description, input_schema).",
                code="unsupported_parameter",
                param=f"tools[{i}].type",
            )
        if "input_schema" not in tool:
            raise missing_param(f"tools[{i}].input_schema")
        function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """Anthropic's ``tool_choice`` as chat's ``tool_choice`` and ``parallel_tool_calls``."""
    if choice is None:
        return None, None
    if not isinstance(choice, dict):
        raise invalid_type("tool_choice", "an object")
    kind = choice.get("type")
    chat: Any
    if kind == "auto":
        chat = "auto"
    elif kind == "any":
        chat = "required"
    elif kind == "none":
        chat = "none"
    elif kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise missing_param("tool_choice.name")
        chat = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _refuse(
            f"Invalid value for 'tool_choice.type': {json.dumps(kind)}. Use auto, any, tool or "
            "none.",
            "tool_choice.type",
        )
    disable = choice.get("disable_parallel_tool_use")
    return chat, (False if disable is True else None)


def _check_sampling(data: JSON) -> None:
    """Anthropic's own ranges: ``temperature`` and ``top_p`` in [0, 1]; ``stop_sequences`` an
    array of strings (chat checks the rest: ``top_k`` ≥ 1 …)."""
    for name in ("temperature", "top_p"):
        value = data.get(name)
        if value is not None and (not is_number(value) or not 0 <= value <= 1):
            raise _refuse(f"'{name}' must be a number between 0 and 1.", name)
    stops = data.get("stop_sequences")
    if stops is not None and (
        not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)
    ):
        raise invalid_type("stop_sequences", "an array of strings")


def _user(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise invalid_type("metadata", "an object")
    user = metadata.get("user_id")
    if user is not None and not isinstance(user, str):
        raise invalid_type("metadata.user_id", "a string")
    return user


def _marks_cache(data: JSON) -> bool:
    """Whether the request asks for prompt caching: ``cache_control`` at the top or on a
    system block, message block or tool."""
    return data.get("cache_control") is not None or '"cache_control"' in json.dumps(
        [data.get("system"), data.get("messages"), data.get("tools")]
    )


def _ignored(data: JSON, marks_cache: bool) -> tuple[str, ...]:
    """The accepted fields this request sets that are not forwarded to a chat vendor
    (``cache_control`` wherever the request carries it)."""
    ignored = {
        name
        for name, handling in FIELDS.items()
        if handling is Handling.IGNORED and data.get(name) is not None
    }
    if marks_cache:
        ignored.add("cache_control")
    return tuple(sorted(ignored))


def _check_fields(data: JSON, accepted: frozenset[str]) -> None:
    unknown = sorted(set(data) - accepted - set(_EXTENSIONS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: Extra inputs are not permitted",
            code="unknown_parameter",
            param=unknown[0],
        )


def parse_messages_request(
    data: JSON, *, headers: dict[str, str] | None = None, count_only: bool = False
) -> MessagesRequest:
    """Validate a Messages request (``count_only``: a ``count_tokens`` request, which takes no
    ``max_tokens``; ``headers``: the call's, lower-case) as the chat request it becomes; a 400
    names the Messages field."""
    _check_fields(data, COUNT_TOKENS if count_only else frozenset(FIELDS))
    if data.get("model") is None:
        raise missing_param("model")
    if not isinstance(data["model"], str) or not data["model"]:
        raise invalid_type("model", "a non-empty string")
    max_tokens = data.get("max_tokens")
    if not count_only:
        if max_tokens is None:
            raise missing_param("max_tokens")
        if not is_int(max_tokens) or max_tokens < 1:
            raise _refuse("'max_tokens' must be an integer of at least 1.", "max_tokens")
    _check_sampling(data)
    messages, origins = _messages(data)
    tool_choice, parallel = _tool_choice(data.get("tool_choice"))
    body: JSON = {
        "model": data["model"],
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": data.get("stream"),
        "temperature": data.get("temperature"),
        "top_p": data.get("top_p"),
        "top_k": data.get("top_k"),
        "stop": data.get("stop_sequences") or None,
        "tools": _tools(data.get("tools")),
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "user": _user(data.get("metadata")),
        **{name: data.get(name) for name in _EXTENSIONS},
    }
    try:
        chat = parse_chat_request({k: v for k, v in body.items() if v is not None})
    except InvalidRequest as exc:
        exc.param = messages_param(exc.param, tuple(origins))
        raise
    headers = headers or {}
    marks_cache = _marks_cache(data)
    return MessagesRequest(
        chat=chat,
        ignored=_ignored(data, marks_cache),
        caches_prompt=marks_cache,
        origins=tuple(origins),
        native={k: v for k, v in data.items() if k not in _EXTENSIONS},
        headers={name: headers[name] for name in FORWARDED_HEADERS if name in headers},
        untranslated_tokens_upper=_untranslated_bytes(data["messages"]),
    )
