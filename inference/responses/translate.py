"""``/v1/responses`` ⇄ chat completions, for vendors that only speak chat.

:func:`parse_responses_request` maps a Responses request onto a chat request and validates it
with the chat rules (:func:`inference.chat.validation.parse_chat_request`: the same 400s,
including the exact presence/frequency penalty text), renaming ``param`` to the Responses
field. :func:`response_object` renders a ``chat.completion`` as a ``response``;
:class:`StreamTranslator` turns ``chat.completion.chunk`` dicts into the Responses stream events
(``response.created`` … ``response.output_text.delta`` … ``response.completed``).

A call continuing a stored response (``previous_response_id``) is given that conversation as
``history`` (:meth:`inference.responses.store.Stored.conversation`): its items become chat
messages before this call's ``input``, after ``instructions`` — so the replayed context is in the
prompt, counted, held and billed as the input it is. :func:`input_items` is what a stored
response keeps of its own input (the items ``GET /v1/responses/{id}/input_items`` lists).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from config.errors import InvalidRequest, invalid_type, missing_param
from inference.chat.validation import ChatRequest, parse_chat_request
from inference.vendors.base import JSON
from money.pricing import Usage


class Handling(enum.Enum):
    """What infrai does with a Responses request field."""

    SAME = "same"  # a chat field of the same name and meaning, forwarded as such
    TRANSLATED = "translated"  # mapped onto chat fields
    STATEFUL = "stateful"  # read by the endpoint: storing, background, the chain
    IGNORED = "ignored"  # accepted, not forwarded, reported in ``ignored_params``
    UNSUPPORTED = "unsupported"  # accepted by OpenAI, refused here with what to do instead


# Every field of OpenAI's ``POST /v1/responses`` request body (its API reference and the
# official SDK's ``ResponseCreateParams``), and what infrai does with it; the one list. A field
# not listed (nor one of :data:`_EXTENSIONS`) is refused as OpenAI refuses it (400
# ``unknown_parameter``).
FIELDS: dict[str, Handling] = {
    "model": Handling.SAME,
    "temperature": Handling.SAME,
    "top_p": Handling.SAME,
    "stream": Handling.SAME,
    "parallel_tool_calls": Handling.SAME,
    "user": Handling.SAME,
    "metadata": Handling.SAME,
    "service_tier": Handling.SAME,
    "safety_identifier": Handling.SAME,
    "prompt_cache_key": Handling.SAME,
    "store": Handling.STATEFUL,  # our store; the vendor is never asked to store a completion
    "background": Handling.STATEFUL,
    "previous_response_id": Handling.STATEFUL,
    "input": Handling.TRANSLATED,
    "instructions": Handling.TRANSLATED,
    "max_output_tokens": Handling.TRANSLATED,
    "tools": Handling.TRANSLATED,
    "tool_choice": Handling.TRANSLATED,
    "text": Handling.TRANSLATED,  # format → response_format, verbosity → verbosity
    "reasoning": Handling.TRANSLATED,  # effort → reasoning_effort; the rest ignored
    "truncation": Handling.IGNORED,
    "include": Handling.IGNORED,
    "max_tool_calls": Handling.IGNORED,
    "top_logprobs": Handling.IGNORED,
    "stream_options": Handling.IGNORED,
    "prompt_cache_retention": Handling.IGNORED,
    "prompt_cache_options": Handling.IGNORED,
    "context_management": Handling.IGNORED,
    "moderation": Handling.IGNORED,
    "conversation": Handling.UNSUPPORTED,
    "prompt": Handling.UNSUPPORTED,
}
# Beyond OpenAI's list: the platform's own fields, chat's open-model sampling fields and the
# penalties (refused with the spec's text unless 0), taken as chat takes them.
_EXTENSIONS = (
    "task", "prefer", "top_k", "repetition_penalty", "seed", "presence_penalty",
    "frequency_penalty",
)  # fmt: skip
_SAME = tuple(n for n, h in FIELDS.items() if h is Handling.SAME) + _EXTENSIONS
_UNSUPPORTED = {
    "conversation": "Stored conversations are not kept; send the whole conversation in 'input' "
    "or continue a stored response with 'previous_response_id'.",
    "prompt": "Stored prompt templates are not supported; send 'instructions' and 'input'.",
}
_PARAM_NAMES = {
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "verbosity": "text.verbosity",
}
_INPUT_ROLES = {"user", "system", "developer", "assistant"}
# The fields of the ``reasoning`` object (OpenAI's ``Reasoning``: ``effort``, ``summary`` and
# the deprecated ``generate_summary``): ``effort`` becomes chat's ``reasoning_effort``, the others
# are reported as ignored; any other is refused, as OpenAI refuses it.
REASONING_FIELDS = ("effort", "summary", "generate_summary")


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A validated Responses request: the chat request it becomes, the fields to echo, and
    what the endpoint does with it beyond the call: ``store`` it (default true, as OpenAI's),
    run it in the ``background``, continue ``previous_response_id``."""

    chat: ChatRequest
    echo: JSON
    store: bool = True
    background: bool = False
    previous_response_id: str | None = None
    ignored: tuple[str, ...] = ()


def responses_param(param: str | None) -> str | None:
    """A chat request field (as a refusal names it — routing's ``messages``, ``max_tokens``,
    ``response_format`` …) named as the Responses request spells it (``input``,
    ``max_output_tokens``, ``text.format``)."""
    return _rename_param(param)


def _rename_param(param: str | None) -> str | None:
    if param is None:
        return None
    if param.startswith("messages"):
        return "input"
    match = re.match(r"^tools\[(\d+)\]\.function\.(.*)$", param)
    if match:
        return f"tools[{match[1]}].{match[2]}"
    head, sep, rest = param.partition(".")
    return _PARAM_NAMES.get(head, head) + sep + rest


def _text_of(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    raise invalid_type(param, "a string or an array of text parts")


def _content_parts(content: list[Any], param: str) -> list[JSON]:
    parts: list[JSON] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text")})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise InvalidRequest(
                    "Only images given by 'image_url' (http(s) or data URL) are supported.",
                    code="invalid_value",
                    param=f"{param}[{j}].image_url",
                )
            image: JSON = {"url": url, "detail": part.get("detail") or "auto"}
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise InvalidRequest(
                f"Unsupported content part type {json.dumps(kind)}; use input_text or input_image.",
                code="invalid_value",
                param=f"{param}[{j}].type",
            )
    return parts


def _message(item: JSON, param: str) -> JSON:
    role = item.get("role")
    if role not in _INPUT_ROLES:
        raise InvalidRequest(
            f"Invalid value for 'role': {json.dumps(role)}. Use one of: "
            + ", ".join(sorted(_INPUT_ROLES))
            + ".",
            code="invalid_value",
            param=f"{param}.role",
        )
    content = item.get("content")
    if content is None:
        raise missing_param(f"{param}.content")
    if role == "user" and isinstance(content, list):
        return {"role": role, "content": _content_parts(content, f"{param}.content")}
    return {"role": role, "content": _text_of(content, f"{param}.content")}


def _messages(data: JSON, history: list[JSON]) -> list[JSON]:
    """Chat messages for ``instructions``, the ``history`` of a previous response (its items,
    as stored) and ``input`` (string or array of items)."""
    messages: list[JSON] = []
    instructions = data.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid_type("instructions", "a string")
        messages.append({"role": "system", "content": instructions})
    _item_messages(history, "previous_response_id", messages)
    raw = data.get("input")
    if raw is None:
        raise missing_param("input")
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise invalid_type("input", "a string or a non-empty array of input items")
    _item_messages(raw, "input", messages)
    return messages


def _item_messages(items: list[Any], name: str, messages: list[JSON]) -> None:
    """Append the chat messages of Responses ``items`` (the field ``name``) to ``messages``."""
    for i, item in enumerate(items):
        param = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise invalid_type(param, "an object")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, param))
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else json.dumps(output),
                }
            )
        elif kind != "reasoning":
            raise InvalidRequest(
                f"Unsupported input item type {json.dumps(kind)}; use message, function_call "
                "or function_call_output.",
                code="invalid_value",
                param=f"{param}.type",
            )


def input_items(data: JSON) -> list[JSON]:
    """This (validated) request's ``input`` as a stored response keeps it: a list of items in
    OpenAI's shapes, each with an ``id`` (a string input is one user message; a message's
    string content one ``input_text`` part, an assistant's one ``output_text`` part)."""
    raw = data["input"]
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    items: list[JSON] = []
    for item in raw:
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            if isinstance(content, str):
                content = [{"type": part, "text": content}]
            items.append(
                {
                    "type": "message",
                    "id": item.get("id") or new_id("msg"),
                    "status": "completed",
                    "role": item.get("role"),
                    "content": content,
                }
            )
        else:
            prefix = {"function_call": "fc", "function_call_output": "fco"}.get(kind, "item")
            items.append({**item, "id": item.get("id") or new_id(prefix)})
    return items


def _flag(data: JSON, name: str, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid_type(name, "a boolean")
    return value


def _tools(data: JSON) -> list[JSON] | None:
    tools = data.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid_type("tools", "an array")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise InvalidRequest(
                f"Only function tools are supported, not {json.dumps(kind)}.",
                code="unsupported_parameter",
                param=f"tools[{i}].type",
            )
        function = {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
        }
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _response_format(text: Any) -> JSON | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise invalid_type("text", "an object")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise invalid_type("text.format", "an object")
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt.get("type")}


def _reported_only(data: JSON) -> JSON:
    """``reasoning.effort`` and ``text.verbosity`` as the chat fields they are: accepted, not
    forwarded, and reported in ``ignored_params`` where the model does not support them."""
    out: JSON = {}
    reasoning = data.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise invalid_type("reasoning", "an object")
        unknown = sorted(set(reasoning) - set(REASONING_FIELDS))
        if unknown:
            raise InvalidRequest(
                f"Unknown parameter: 'reasoning.{unknown[0]}'.",
                code="unknown_parameter",
                param=f"reasoning.{unknown[0]}",
            )
        if reasoning.get("effort") is not None:
            out["reasoning_effort"] = reasoning["effort"]
    text = data.get("text")
    if isinstance(text, dict) and text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    return out


def _ignored(data: JSON) -> tuple[str, ...]:
    """The accepted fields this request sets that no chat vendor is sent (``reasoning``'s
    parts other than ``effort`` named as ``reasoning.<part>``)."""
    ignored = {
        name
        for name, handling in FIELDS.items()
        if handling is Handling.IGNORED and data.get(name) is not None
    }
    reasoning = data.get("reasoning")
    if isinstance(reasoning, dict):
        ignored |= {f"reasoning.{k}" for k, v in reasoning.items() if k != "effort" and v}
    return tuple(sorted(ignored))


def stateful_fields(data: JSON) -> tuple[bool, bool, str | None]:
    """``store`` (default true), ``background`` (default false) and ``previous_response_id``
    of a Responses request body, type-checked (400 naming the field)."""
    previous = data.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid_type("previous_response_id", "a response id string")
    return _flag(data, "store", True), _flag(data, "background", False), previous


def parse_responses_request(data: JSON, history: list[JSON] | None = None) -> ResponsesRequest:
    """Validate a Responses request as the chat request it becomes (400 names the Responses
    field); the chat request needs the ``responses`` capability besides its own. ``history``:
    the items of the response ``previous_response_id`` names, read by the caller."""
    for name, message in _UNSUPPORTED.items():
        if data.get(name) is not None:
            raise InvalidRequest(message, code="unsupported_parameter", param=name)
    store, background, previous = stateful_fields(data)
    unknown = sorted(set(data) - set(FIELDS) - set(_EXTENSIONS))
    if unknown:
        raise InvalidRequest(
            f"Unrecognized request argument supplied: {unknown[0]}",
            code="unknown_parameter",
            param=unknown[0],
        )
    body: JSON = {k: data[k] for k in _SAME if data.get(k) is not None}
    body.pop("store", None)  # a stored response is ours, not the vendor's stored completion
    body["messages"] = _messages(data, history or [])
    optional = {
        "max_tokens": data.get("max_output_tokens"),
        "tools": _tools(data),
        "tool_choice": _tool_choice(data.get("tool_choice")),
        "response_format": _response_format(data.get("text")),
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    body.update(_reported_only(data))
    try:
        chat = parse_chat_request(body)
    except InvalidRequest as exc:
        exc.param = _rename_param(exc.param)
        raise
    chat = dataclasses.replace(
        chat,
        capabilities=chat.capabilities | {"responses"},
        max_output_param="max_output_tokens",
    )
    echo = {
        "instructions": data.get("instructions"),
        "max_output_tokens": data.get("max_output_tokens"),
        "temperature": data.get("temperature", 1.0),
        "top_p": data.get("top_p", 1.0),
        "tools": data.get("tools") or [],
        "tool_choice": data.get("tool_choice", "auto"),
        "parallel_tool_calls": data.get("parallel_tool_calls", True),
        "text": data.get("text") or {"format": {"type": "text"}},
        "metadata": data.get("metadata") or {},
        "user": data.get("user"),
        "store": store,
        "background": background,
        "previous_response_id": previous,
    }
    return ResponsesRequest(
        chat=chat,
        echo=echo,
        store=store,
        background=background,
        previous_response_id=previous,
        ignored=_ignored(data),
    )


# --- answers ---------------------------------------------------------------------------------
def new_id(prefix: str) -> str:
    """An output item id (``msg_…``, ``fc_…``)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def openai_usage(usage: Usage) -> JSON:
    """The Responses ``usage`` object."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def message_item(text: str, *, item_id: str, status: str = "completed") -> JSON:
    """An assistant ``message`` output item holding one ``output_text`` part."""
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def function_call_item(
    *, item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> JSON:
    """A ``function_call`` output item."""
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def output_items(completion: JSON) -> tuple[list[JSON], str | None]:
    """The output items of a ``chat.completion`` (first choice) and its finish reason."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    items: list[JSON] = []
    if message.get("content") or not message.get("tool_calls"):
        items.append(message_item(str(message.get("content") or ""), item_id=new_id("msg")))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(
            function_call_item(
                item_id=new_id("fc"),
                call_id=str(call.get("id") or new_id("call")),
                name=str(function.get("name") or ""),
                arguments=str(function.get("arguments") or ""),
            )
        )
    return items, choice.get("finish_reason")


def response_object(
    *,
    response_id: str,
    created_at: int,
    model: str,
    echo: JSON,
    output: list[JSON],
    usage: Usage | None,
    status: str = "completed",
    finish_reason: str | None = None,
    error: JSON | None = None,
) -> JSON:
    """A ``response`` object. ``finish_reason`` ``length`` makes it ``incomplete``."""
    incomplete = None
    if status == "completed" and finish_reason == "length":
        status, incomplete = "incomplete", {"reason": "max_output_tokens"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "model": model,
        "output": output,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "truncation": "disabled",
        "usage": openai_usage(usage) if usage is not None else None,
        **echo,
    }


# --- streams ---------------------------------------------------------------------------------
def sse_event(event: JSON) -> bytes:
    """One Server-Sent Event of the Responses stream (``event:`` is the event's type)."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


@dataclass
class _Call:
    output_index: int
    item_id: str
    call_id: str
    name: str
    arguments: str = ""


@dataclass
class StreamTranslator:
    """Chat chunks in, Responses events out, in OpenAI's order, with sequence numbers.

    Call :meth:`start` once, :meth:`feed` per chunk, then :meth:`completed` or :meth:`failed`
    (whose ``response`` object is then :attr:`final`); :meth:`snapshot` renders the response as
    it stands in any status (a background response queued, cancelled …). ``text`` is what has
    been streamed so far (for billing an interrupted stream).
    """

    response_id: str
    model: str
    echo: JSON
    created_at: int = field(default_factory=lambda: int(time.time()))
    text: str = ""
    finish_reason: str | None = None
    _sequence: int = 0
    _message: tuple[int, str] | None = None  # (output_index, item id)
    _calls: dict[int, _Call] = field(default_factory=dict)
    _items: int = 0
    final: JSON | None = None

    def snapshot(self, status: str, usage: Usage | None = None, **extra: Any) -> JSON:
        """The ``response`` object in ``status`` with the output so far."""
        return self._response(status, usage, **extra)

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse_event(event)

    def _response(self, status: str, usage: Usage | None = None, **extra: Any) -> JSON:
        return response_object(
            response_id=self.response_id,
            created_at=self.created_at,
            model=self.model,
            echo=self.echo,
            output=self._output() if status != "in_progress" else [],
            usage=usage,
            status=status,
            finish_reason=self.finish_reason,
            **extra,
        )

    def _output(self) -> list[JSON]:
        items: list[tuple[int, JSON]] = []
        if self._message is not None:
            items.append((self._message[0], message_item(self.text, item_id=self._message[1])))
        for call in self._calls.values():
            items.append(
                (
                    call.output_index,
                    function_call_item(
                        item_id=call.item_id,
                        call_id=call.call_id,
                        name=call.name,
                        arguments=call.arguments,
                    ),
                )
            )
        return [item for _, item in sorted(items, key=lambda pair: pair[0])]

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``."""
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def feed(self, chunk: JSON) -> list[bytes]:
        """The events for one chat chunk (its first choice)."""
        events: list[bytes] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events.extend(self._text(str(delta["content"])))
            for call in delta.get("tool_calls") or []:
                events.extend(self._tool_call(call))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def _text(self, delta: str) -> list[bytes]:
        events = []
        if self._message is None:
            self._message = (self._items, new_id("msg"))
            self._items += 1
            index, item_id = self._message
            events.append(
                self._event(
                    "response.output_item.added",
                    output_index=index,
                    item={**message_item("", item_id=item_id, status="in_progress"), "content": []},
                )
            )
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []},
                )
            )
        self.text += delta
        index, item_id = self._message
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=delta,
                logprobs=[],
            )
        )
        return events

    def _tool_call(self, delta: JSON) -> list[bytes]:
        position = int(delta.get("index", 0))
        function = delta.get("function") or {}
        call = self._calls.get(position)
        events = []
        if call is None:
            call = _Call(
                output_index=self._items,
                item_id=new_id("fc"),
                call_id=str(delta.get("id") or new_id("call")),
                name=str(function.get("name") or ""),
            )
            self._items += 1
            self._calls[position] = call
            item = function_call_item(
                item_id=call.item_id,
                call_id=call.call_id,
                name=call.name,
                arguments="",
                status="in_progress",
            )
            events.append(
                self._event("response.output_item.added", output_index=call.output_index, item=item)
            )
        arguments = str(function.get("arguments") or "")
        if arguments:
            call.arguments += arguments
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.item_id,
                    output_index=call.output_index,
                    delta=arguments,
                )
            )
        return events

    def _done_events(self) -> list[bytes]:
        events = []
        if self._message is not None:
            index, item_id = self._message
            part = {"type": "output_text", "text": self.text, "annotations": []}
            events += [
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=self.text,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
                self._event(
                    "response.output_item.done",
                    output_index=index,
                    item=message_item(self.text, item_id=item_id),
                ),
            ]
        for call in self._calls.values():
            item = function_call_item(
                item_id=call.item_id, call_id=call.call_id, name=call.name, arguments=call.arguments
            )
            events += [
                self._event(
                    "response.function_call_arguments.done",
                    item_id=call.item_id,
                    output_index=call.output_index,
                    name=call.name,
                    arguments=call.arguments,
                ),
                self._event("response.output_item.done", output_index=call.output_index, item=item),
            ]
        return events

    def completed(self, usage: Usage, infrai: JSON) -> list[bytes]:
        """The done events and ``response.completed`` (or ``.incomplete`` at the token cap)."""
        response = self.final = {**self._response("completed", usage), "infrai": infrai}
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [*self._done_events(), self._event(kind, response=response)]

    def failed(self, usage: Usage, infrai: JSON, message: str) -> list[bytes]:
        """``response.failed`` for a stream the vendor broke after it started."""
        error = {"code": "server_error", "message": message}
        response = self.final = {**self._response("failed", usage, error=error), "infrai": infrai}
        return [self._event("response.failed", response=response)]
