"""llama.cpp's C API as the chat engine and the benchmark's reference both call it.

Standard library only (``llama_cpp`` is imported when first needed), so
``bench/llama_cpp_reference.py`` can use it under an interpreter that has ``llama-cpp-python``
and none of the model server's dependencies: the reference fills its batches as the engine does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
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


# A prompt of several tokens in two sequences through llama_decode, in a fresh interpreter, so a
# build whose kernels crash kills that process, not the caller. The case that broke: built
# natively with GCC 12 on a CPU with AMX, ggml's AMX matrix product (any batch of more than one
# token) loads a tile configuration whose fields GCC 12's ``_tile_loadconfig`` let the optimiser
# drop (its asm operand covers 8 of the 64 bytes): ldtilecfg faults, a segfault
# (ggml-org/llama.cpp#20824).
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 in CMAKE_C_FLAGS and CMAKE_CXX_FLAGS"
PROBE_OUTPUT = "decode 0 [15, 31]"
_PROBE = """
import llama_cpp as lc
from gpu_backend.llama_cpp_batch import fill_batch, silence_llama_cpp
lc.llama_backend_init()
silence_llama_cpp()
model = lc.llama_model_load_from_file({gguf!r}.encode(), lc.llama_model_default_params())
params = lc.llama_context_default_params()
params.n_ctx, params.n_seq_max, params.kv_unified = 512, 2, True
params.n_threads = params.n_threads_batch = 1
ctx = lc.llama_init_from_model(model, params)
batch = lc.llama_batch_init(64, 0, 1)
entries = [(100 + p, p, s, p == 15) for s in (0, 1) for p in range(16)]
wanted = fill_batch(batch, entries)
print("decode", lc.llama_decode(ctx, batch), wanted)
"""


def probe(gguf: Path, timeout_s: float = 120.0) -> str | None:
    """Whether this interpreter's llama-cpp-python decodes a batch of ``gguf`` (a 16-token
    prefill of two sequences) in a child process: ``None`` when it does, else why not — not
    installed, or the build crashed (``exit -11``: rebuild it with :data:`NO_AMX`). About half
    a second; a bad build can then never take the model server down."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PROBE.format(gguf=str(gguf)))],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode == 0 and done.stdout.strip() == PROBE_OUTPUT:
        return None
    if "No module named 'llama_cpp'" in done.stderr:
        return "llama-cpp-python is not installed (the optional llama-cpp extra)"
    return (
        f"llama.cpp failed a 16-token prefill (exit {done.returncode}): a broken build; on a "
        f"CPU with AMX built by GCC 12, rebuild llama-cpp-python with {NO_AMX}"
    )
