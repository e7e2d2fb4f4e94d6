"""Benchmark of the gpu-backend: streaming chat at 1, 4 and 16 concurrent streams, and embeddings.

Starts the server itself (``python -m gpu_backend``) unless ``--url`` points at one
that is already running, then prints a Markdown table:

    python bench/gpu_backend.py --threads 2                 # CPU (or CUDA when present)
    python bench/gpu_backend.py --url http://127.0.0.1:8001 # an existing server
    python bench/gpu_backend.py --threads 1 --llama-cpp /tmp/llamacpp-venv/bin/python

``--llama-cpp PYTHON`` adds llama.cpp on the same GGUF as reference rows, measured in the same
run right after the server (``bench/llama_cpp_reference.py`` under ``PYTHON``, an interpreter of
a throwaway virtualenv with ``llama-cpp-python``; never the project's, see docs/performance.md).

Per concurrency level every stream asks for the same number of tokens; usage comes from the
server (``stream_options.include_usage``), so token counts are exact. Reported per level:
time to first token (median and worst), aggregate tokens/s (all completion tokens over the
wall time of the level) and per-stream decode tokens/s (tokens after the first over the time
after the first). Embeddings: texts/s for single-text requests sent 16 at a time (the batcher
merges them) and for one 64-text request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
# Run as a script, this file's own name would shadow the gpu_backend package: the repo comes first.
sys.path[0] = str(REPO)

from gpu_backend.config import default_threads  # noqa: E402
from gpu_backend.locate import smollm2_gguf  # noqa: E402

CHAT_MODEL = "SmolLM2-135M-Instruct"
EMBED_MODEL = "all-MiniLM-L6-v2"
PROMPTS = [
    "Write a long story about a lighthouse keeper.",
    "Explain how a steam engine works, in detail.",
    "Describe a walk through a busy market in the morning.",
    "Write a detailed history of the bicycle.",
]


@dataclass(frozen=True)
class StreamResult:
    """Timings of one streamed completion (seconds from the level's start)."""

    first_token_s: float
    done_s: float
    completion_tokens: int


@dataclass(frozen=True)
class LevelResult:
    """One row of the chat table."""

    streams: int
    ttft_median_s: float
    ttft_max_s: float
    aggregate_tps: float
    per_stream_tps: float
    tokens: int
    max_batch: int


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(args: argparse.Namespace) -> Iterator[str]:
    """A gpu-backend with the chat and embedding models, ready; yields its base URL."""
    if args.url:
        yield args.url.rstrip("/")
        return
    port = free_port()
    command = [
        sys.executable, "-m", "gpu_backend", "--host", "127.0.0.1", "--port", str(port),
        "--threads", str(args.threads), "--models", f"{CHAT_MODEL},{EMBED_MODEL}",
        "--max-batch", str(max(args.streams)), "--device", args.device, "--log-level", "warning",
    ]  # fmt: skip
    if args.cache_dir:
        command += ["--cache-dir", args.cache_dir]
    if args.cpu_weights:
        command += ["--cpu-weights", args.cpu_weights]
    if args.cpu_engine:
        command += ["--cpu-engine", args.cpu_engine]
    log = Path(tempfile.mkstemp(prefix="gpu-backend-bench-", suffix=".log")[1])
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, log)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.unlink(missing_ok=True)


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, limit_s: float = 600) -> None:
    """Poll ``/health`` until every model is ready (exit with the log if the server dies)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"server exited:\n{log.read_text()}")
        try:
            if httpx.get(url + "/health", timeout=2).json()["ready"]:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    sys.exit(f"server not ready after {limit_s} s:\n{log.read_text()}")


async def one_stream(
    client: httpx.AsyncClient, prompt: str, max_tokens: int, t0: float
) -> StreamResult:
    """Stream one completion; returns when ``[DONE]`` arrives."""
    body = {
        "model": CHAT_MODEL, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    first, tokens = 0.0, 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if not first and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - t0
    return StreamResult(first, time.perf_counter() - t0, tokens)


async def chat_level(url: str, streams: int, max_tokens: int) -> LevelResult:
    """Run ``streams`` concurrent streams once and summarise them."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await client.get("/stats")
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(client, PROMPTS[i % len(PROMPTS)], max_tokens, t0) for i in range(streams))
        )
        wall = time.perf_counter() - t0
        stats = (await client.get("/stats")).json()["chat"]
    ttfts = [r.first_token_s for r in results]
    decode_rates = [
        (r.completion_tokens - 1) / (r.done_s - r.first_token_s)
        for r in results
        if r.completion_tokens > 1 and r.done_s > r.first_token_s
    ]
    total = sum(r.completion_tokens for r in results)
    return LevelResult(
        streams=streams,
        ttft_median_s=statistics.median(ttfts),
        ttft_max_s=max(ttfts),
        aggregate_tps=total / wall,
        per_stream_tps=statistics.mean(decode_rates) if decode_rates else 0.0,
        tokens=total,
        max_batch=int(stats["max_batch_size"]),
    )


async def embeddings_rates(url: str, requests: int) -> tuple[float, float, int]:
    """(texts/s for concurrent single-text requests, texts/s for one 64-text request, max
    requests merged into one forward pass)."""
    texts = [f"Benchmark sentence number {i} about the weather and the sea." for i in range(64)]
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await client.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": texts[:4]})
        semaphore = asyncio.Semaphore(16)

        async def single(i: int) -> None:
            async with semaphore:
                body = {"model": EMBED_MODEL, "input": texts[i % 64]}
                (await client.post("/v1/embeddings", json=body)).raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(single(i) for i in range(requests)))
        concurrent = requests / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        (
            await client.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": texts})
        ).raise_for_status()
        batch = len(texts) / (time.perf_counter() - t0)
        merged = int((await client.get("/stats")).json()["embeddings"]["max_requests_per_pass"])
    return concurrent, batch, merged


def llama_cpp_levels(args: argparse.Namespace) -> list[LevelResult]:
    """llama.cpp's rows: ``bench/llama_cpp_reference.py`` run under ``args.llama_cpp``."""
    command = [
        args.llama_cpp, str(REPO / "bench" / "llama_cpp_reference.py"),
        "--gguf", str(smollm2_gguf()), "--threads", str(args.threads),
        "--streams", ",".join(str(n) for n in args.streams),
        "--max-tokens", str(args.max_tokens),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [LevelResult(**json.loads(line)) for line in out.splitlines() if line.startswith("{")]


def print_tables(
    chat: str,
    device: str,
    levels: list[LevelResult],
    embed: tuple[float, float, int],
    reference: list[LevelResult],
) -> None:
    """The Markdown tables docs/performance.md quotes (llama.cpp rows when measured)."""
    print(f"\nChat ({CHAT_MODEL}, {chat}), streaming, greedy:\n")
    print(
        "| engine | streams | TTFT median (s) | TTFT max (s) | aggregate tok/s "
        "| per-stream tok/s | tokens | max batch seen |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = [("gpu-backend", r) for r in levels] + [("llama.cpp", r) for r in reference]
    for engine, r in rows:
        print(
            f"| {engine} | {r.streams} | {r.ttft_median_s:.2f} | {r.ttft_max_s:.2f} "
            f"| {r.aggregate_tps:.1f} | {r.per_stream_tps:.1f} | {r.tokens} | {r.max_batch} |"
        )
    concurrent, batch, merged = embed
    print(f"\nEmbeddings ({EMBED_MODEL}, {device}):\n")
    print("| workload | texts/s |")
    print("|---|---:|")
    workload = f"single-text requests, 16 in flight (up to {merged} merged per pass)"
    print(f"| {workload} | {concurrent:.0f} |")
    print(f"| one request of 64 texts | {batch:.0f} |")


def main() -> None:
    """Parse flags, run every level, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="benchmark a running server instead of starting one")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--cache-dir", default=os.environ.get("INFRAI_MODEL_CACHE_DIR"))
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16]
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--embedding-requests", type=int, default=256)
    parser.add_argument(
        "--llama-cpp", metavar="PYTHON", help="an interpreter with llama-cpp-python: adds its rows"
    )
    parser.add_argument(
        "--cpu-weights", choices=("int8", "fp32"), default=None, help="the server's --cpu-weights"
    )
    parser.add_argument(
        "--cpu-engine",
        choices=("transformers", "llama-cpp"),
        default=None,
        help="the server's --cpu-engine",
    )
    args = parser.parse_args()
    with server(args) as url:
        health = httpx.get(url + "/health").json()
        device = f"{health['device']}/{health['dtype']}, {health['threads']} thread(s)"
        chat = f"{health['models'][CHAT_MODEL]['detail']}, {health['threads']} thread(s)"
        levels = [asyncio.run(chat_level(url, n, args.max_tokens)) for n in args.streams]
        embed = asyncio.run(embeddings_rates(url, args.embedding_requests))
    reference = llama_cpp_levels(args) if args.llama_cpp else []
    print_tables(chat, device, levels, embed, reference)


if __name__ == "__main__":
    main()
