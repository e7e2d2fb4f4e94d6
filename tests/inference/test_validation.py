"""The platform's own request fields: every endpoint takes ``task`` / ``prefer``, only chat
takes ``cache`` (inference.validation.EXTENSIONS and chat's addition)."""

from __future__ import annotations

import pytest

from config.errors import InvalidRequest
from inference.chat.validation import parse_chat_request
from inference.endpoints.metered import reject_unknown
from inference.validation import EXTENSIONS

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


def test_every_endpoint_accepts_the_routing_extensions() -> None:
    assert set(EXTENSIONS) == {"task", "prefer"}
    reject_unknown({"input": "x", "task": "chat", "prefer": "cheapest"}, {"input"})
    chat = parse_chat_request({**CHAT, "task": "chat", "prefer": "cheapest"})
    assert (chat.task, chat.prefer) == ("chat", "cheapest")


def test_only_chat_accepts_cache() -> None:
    assert parse_chat_request({**CHAT, "cache": False}).cache_allowed is False
    with pytest.raises(InvalidRequest) as err:
        reject_unknown({"input": "x", "cache": False}, {"input"})
    assert (err.value.code, err.value.param) == ("unknown_parameter", "cache")


def test_a_field_outside_the_extensions_is_unknown_everywhere() -> None:
    with pytest.raises(InvalidRequest) as err:
        reject_unknown({"input": "x", "route": "fast"}, {"input"})
    assert err.value.param == "route"
    with pytest.raises(InvalidRequest) as err:
        parse_chat_request({**CHAT, "route": "fast"})
    assert err.value.param == "route"
