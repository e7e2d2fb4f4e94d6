"""Token ids → text deltas, with OpenAI ``stop`` sequences and no broken UTF-8 in a delta."""

from __future__ import annotations

from typing import Any, Protocol


class Decoder(Protocol):
    """The part of a tokenizer this module needs."""

    def decode(self, token_ids: Any, skip_special_tokens: bool = ..., **kwargs: Any) -> Any: ...


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas whose concatenation is the full text.

    A delta is withheld while the tail decodes to an incomplete UTF-8 character (``\\ufffd``);
    only a small window of ids is re-decoded per step, so each push costs O(1) tokens.
    """

    def __init__(self, decoder: Decoder) -> None:
        self._decoder = decoder
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def push(self, token_id: int) -> str:
        """Append one token; returns the text it completes (may be empty)."""
        self._ids.append(token_id)
        prefix = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._decode(self._ids[self._prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return full[len(prefix) :]
        return ""

    def _decode(self, ids: list[int]) -> str:
        return str(self._decoder.decode(ids, skip_special_tokens=True)) if ids else ""


class StopMatcher:
    """Releases text as it arrives, cutting at the first ``stop`` string (which is dropped).

    Text that could still become the start of a stop string is held back until it either
    completes the stop string or is ruled out, so a client never sees a partial stop sequence.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Add ``text``; returns what can be released now. After a stop, returns ''."""
        if self.stopped:
            return ""
        self._pending += text
        cut = self._first_stop_index()
        if cut is not None:
            self.stopped = True
            released, self._pending = self._pending[:cut], ""
            return released
        keep = self._held_suffix_length()
        released = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return released

    def flush(self) -> str:
        """Release whatever is held (the generation ended without a stop string)."""
        released, self._pending = ("" if self.stopped else self._pending), ""
        return released

    def _first_stop_index(self) -> int | None:
        found = [i for i in (self._pending.find(s) for s in self._stops) if i >= 0]
        return min(found) if found else None

    def _held_suffix_length(self) -> int:
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(stop[:size]):
                    longest = size
                    break
        return longest
