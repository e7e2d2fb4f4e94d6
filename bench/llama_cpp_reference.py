"""llama.cpp on the same GGUF, as the reference row of ``bench/gpu_backend.py --llama-cpp``.

Runs under an interpreter that has ``llama-cpp-python`` (the project's with the optional
``llama-cpp`` extra, or a throwaway virtualenv; a source build of minutes: with GCC 12 on a CPU
with AMX, build it with ``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16``, or every batch of more
than one token segfaults); of the project it imports only ``gpu_backend.llama_cpp_batch``
(standard library only), which fills batches as the engine does::

    .venv/bin/python bench/llama_cpp_reference.py --gguf PATH --threads 1

For each number of streams it prefills that many chat prompts in one batch (each its own
sequence), then decodes all of them together, greedy, ``--max-tokens`` tokens each (end-of-turn
ignored, so every stream decodes the same count), through llama.cpp's own batched
``llama_decode``. Prints one JSON object per level, the fields of ``bench/gpu_backend.py``'s
``LevelResult``: ``streams``, ``ttft_median_s`` and ``ttft_max_s`` (both the prefill and first
token, which every stream gets at once), ``aggregate_tps`` (all tokens over the level's wall
time), ``per_stream_tps`` (tokens after the first over the time after the first, per stream),
``tokens`` and ``max_batch`` (the streams: all decode together).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import llama_cpp as lc
import numpy as np

# Run as a script, this file's folder would come first and bench/gpu_backend.py would shadow the
# package: the repository comes first instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from gpu_backend.llama_cpp_batch import fill_batch, silence_llama_cpp  # noqa: E402

PROMPTS = [
    "Write a long story about a lighthouse keeper.",
    "Explain how a steam engine works, in detail.",
    "Describe a walk through a busy market in the morning.",
    "Write a detailed history of the bicycle.",
]


def chatml(prompt: str) -> bytes:
    """SmolLM2's chat template (ChatML) around one user message, ready for the answer."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n".encode()


def tokenize(vocab: lc.llama_vocab_p, text: bytes) -> list[int]:
    """Token ids of ``text`` with the template's special tokens parsed."""
    buffer = (lc.llama_token * 512)()
    count = lc.llama_tokenize(vocab, text, len(text), buffer, 512, True, True)
    return list(buffer[:count])


def level(ctx: lc.llama_context_p, vocab: lc.llama_vocab_p, streams: int, max_tokens: int) -> dict:
    """One concurrency level: batched prefill, then ``max_tokens - 1`` batched decode steps."""
    lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    batch = lc.llama_batch_init(4096, 0, streams)
    prompts = [tokenize(vocab, chatml(PROMPTS[s % len(PROMPTS)])) for s in range(streams)]

    def argmax(index: int) -> int:
        logits = lc.llama_get_logits_ith(ctx, index)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(n_vocab,))))

    began = time.perf_counter()
    entries, last_index = [], []
    for seq, ids in enumerate(prompts):
        for pos, token in enumerate(ids):
            entries.append((token, pos, seq, pos == len(ids) - 1))
        last_index.append(len(entries) - 1)
    fill_batch(batch, entries)
    if lc.llama_decode(ctx, batch) != 0:
        raise RuntimeError("llama_decode failed on the prefill")
    current = [argmax(i) for i in last_index]
    first = time.perf_counter() - began
    positions = [len(ids) for ids in prompts]
    for _ in range(max_tokens - 1):
        fill_batch(batch, [(current[s], positions[s], s, True) for s in range(streams)])
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed on a decode step")
        current = [argmax(s) for s in range(streams)]
        positions = [p + 1 for p in positions]
    wall = time.perf_counter() - began
    lc.llama_batch_free(batch)
    return {
        "streams": streams,
        "ttft_median_s": first,
        "ttft_max_s": first,
        "aggregate_tps": streams * max_tokens / wall,
        "per_stream_tps": (max_tokens - 1) / (wall - first),
        "tokens": streams * max_tokens,
        "max_batch": streams,
    }


def main() -> None:
    """Load the GGUF once and print one JSON line per level."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16]
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--kv-unified",
        action="store_true",
        help="one KV cache shared by all sequences, as the server's engine has",
    )
    args = parser.parse_args()
    lc.llama_backend_init()
    silence_llama_cpp()
    model = lc.llama_model_load_from_file(args.gguf.encode(), lc.llama_model_default_params())
    params = lc.llama_context_default_params()
    params.n_ctx = 256 * max(args.streams)
    params.n_batch = params.n_ubatch = 4096
    params.n_seq_max = max(args.streams)
    params.kv_unified = args.kv_unified
    params.n_threads = params.n_threads_batch = args.threads
    ctx = lc.llama_init_from_model(model, params)
    vocab = lc.llama_model_get_vocab(model)
    level(ctx, vocab, 1, 8)  # warm-up
    for streams in args.streams:
        print(json.dumps(level(ctx, vocab, streams, args.max_tokens)), flush=True)
    lc.llama_free(ctx)
    lc.llama_model_free(model)


if __name__ == "__main__":
    main()
