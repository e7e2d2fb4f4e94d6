"""How a file's text becomes the chunks a vector store embeds: pure functions, no I/O.

Paragraphs (split on blank lines) are packed whole into a chunk while they fit, so a chunk does
not cut a paragraph it could hold; a paragraph longer than the chunk size is cut into windows
that overlap (OpenAI's static strategy). Sizes are cl100k tokens
(:data:`inference.tokens.ENCODING`).
"""

from __future__ import annotations

import functools
import re

import tiktoken

from inference import tokens

# OpenAI's ``auto`` chunking strategy: chunks of 800 tokens, windows overlapping by 400.
DEFAULT_CHUNK_TOKENS = 800
DEFAULT_OVERLAP_TOKENS = 400
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


@functools.cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(tokens.ENCODING)


def windows(ids: list[int], max_tokens: int, overlap: int) -> list[list[int]]:
    """``ids`` as windows of at most ``max_tokens``, each starting ``max_tokens - overlap``
    after the previous; the last one ends at the end of ``ids`` (none for no ids).
    ``overlap`` must be smaller than ``max_tokens``."""
    step = max_tokens - overlap
    out = []
    for start in range(0, len(ids), step):
        out.append(ids[start : start + max_tokens])
        if start + max_tokens >= len(ids):
            break
    return out


def chunk_text(text: str, *, max_tokens: int, overlap: int) -> list[str]:
    """``text`` as chunks of at most ``max_tokens`` cl100k tokens, in order, each stripped and
    none empty (a text of whitespace has none).

    Paragraphs are packed whole, joined by a blank line, while they fit; a paragraph longer
    than ``max_tokens`` is cut into windows that overlap by ``overlap`` tokens
    (:func:`windows`).
    """
    enc = _encoding()
    chunks: list[str] = []
    pending: list[int] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        ids = enc.encode(paragraph.strip(), disallowed_special=())
        if not ids:
            continue
        joined = pending + enc.encode("\n\n") + ids if pending else ids
        if len(joined) <= max_tokens:
            pending = joined
            continue
        if pending:
            chunks.append(enc.decode(pending))
            pending = []
        if len(ids) <= max_tokens:
            pending = ids
            continue
        chunks.extend(enc.decode(w) for w in windows(ids, max_tokens, overlap))
    if pending:
        chunks.append(enc.decode(pending))
    return [c.strip() for c in chunks if c.strip()]


def chunk_file(
    content: bytes, *, max_tokens: int, overlap: int, max_chunks: int
) -> tuple[list[str], str | None]:
    """A file's bytes as chunks (:func:`chunk_text` of its UTF-8 text, NUL characters
    dropped): ``(chunks, None)``, or ``([], why)`` when the file cannot be attached — it is
    not UTF-8 text, holds no text, or makes more than ``max_chunks`` chunks. ``why`` is the
    sentence shown to the caller as the file's ``last_error.message``."""
    try:
        text = content.decode("utf-8").replace("\x00", "")
    except UnicodeDecodeError:
        return [], "The file is not UTF-8 text."
    chunks = chunk_text(text, max_tokens=max_tokens, overlap=overlap) if text else []
    if not chunks:
        return [], "The file holds no text."
    if len(chunks) > max_chunks:
        return [], f"The file makes more than {max_chunks} chunks."
    return chunks, None
