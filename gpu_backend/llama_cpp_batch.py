"""llama.cpp's C API as the chat engine and the benchmark's reference both call it.

Standard library only (``llama_cpp`` is imported when first needed), so
``bench/llama_cpp_reference.py`` can use it under an interpreter that has ``llama-cpp-python``
and none of the model server's dependencies: the reference fills its batches as the engine does.
"""

from __future__ import annotations

from typing import Any

_QUIET_CALLBACK: Any = None  # kept alive for the process: llama.cpp's log callback is global


def fill_batch(batch: Any, entries: list[tuple[int, int, int, bool]]) -> list[int]:
    """Put ``(token, position, sequence id, wants_logits)`` entries into the ``llama_batch``
    ``batch`` (one sequence per entry); returns the indices whose logits were asked for."""
    wanted = []
    for i, (token, position, seq, logits) in enumerate(entries):
        batch.token[i] = token
        batch.pos[i] = position
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if logits else 0
        if logits:
            wanted.append(i)
    batch.n_tokens = len(entries)
    return wanted


def silence_llama_cpp() -> None:
    """Route llama.cpp's log lines (model card, timings) to a callback that drops them."""
    global _QUIET_CALLBACK
    if _QUIET_CALLBACK is not None:
        return
    import llama_cpp

    @llama_cpp.llama_log_callback  # type: ignore[misc]
    def quiet(level: int, text: bytes, user_data: Any) -> None:
        return None

    _QUIET_CALLBACK = quiet
    llama_cpp.llama_log_set(quiet, None)
