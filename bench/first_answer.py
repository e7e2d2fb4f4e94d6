"""Seconds from ``make run``'s start to the first chat answer, on a fresh data directory.

Starts ``scripts/run.sh`` (what ``make run`` runs after its install step) with its own ports and
a new ``INFRAI_DATA_DIR`` (nothing configured: a fresh PostgreSQL and Redis of its own, no demo
key yet), waits for the demo key that
``manage.py bootstrap`` writes, then asks the local chat model through the gateway with the
OpenAI SDK, retrying while the platform cannot answer yet, and prints when each milestone
happened (seconds since the script started ``run.sh``)::

    python bench/first_answer.py [--port 18300] [--gpu-port 18301] [--runs 1]

The install step is not timed (the conversion of the chat model's GGUF happens there, once).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

REPO = Path(__file__).resolve().parents[1]
CHAT_MODEL = "SmolLM2-135M-Instruct"


def first_answer(port: int, gpu_port: int, limit_s: float) -> dict[str, float]:
    """One cold start of ``scripts/run.sh``; returns the milestones in seconds since its start."""
    data_dir = Path(tempfile.mkdtemp(prefix="infrai-first-answer-"))
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
        "PORT": str(port),
        "GPU_PORT": str(gpu_port),
        "INFRAI_DATA_DIR": str(data_dir),
    }
    log = data_dir / "run.log"
    began = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group: run.sh and everything it started
        )
    marks: dict[str, float] = {}
    try:
        key_file = data_dir / "demo_key"
        backend = f"http://127.0.0.1:{gpu_port}/health"
        while time.monotonic() - began < limit_s:
            if process.poll() is not None:
                sys.exit(f"run.sh exited with {process.returncode}:\n{log.read_text()}")
            now = time.monotonic() - began
            if "backend_http" not in marks:
                try:
                    health = httpx.get(backend, timeout=1).json()
                    marks["backend_http"] = now
                except httpx.HTTPError:
                    health = None
            if "chat_ready" not in marks:
                try:
                    health = httpx.get(backend, timeout=1).json()
                    if health["models"][CHAT_MODEL]["state"] == "ready":
                        marks["chat_ready"] = time.monotonic() - began
                except (httpx.HTTPError, KeyError):
                    pass
            if key_file.exists() and key_file.read_text().strip():
                marks.setdefault("demo_key", now)
                client = openai.OpenAI(
                    base_url=f"http://127.0.0.1:{port}/v1",
                    api_key=key_file.read_text().strip(),
                    max_retries=0,
                    timeout=120,
                )
                try:
                    client.chat.completions.create(
                        model=CHAT_MODEL,
                        messages=[{"role": "user", "content": "Say hi"}],
                        max_tokens=8,
                    )
                except (openai.APIConnectionError, openai.APIStatusError):
                    time.sleep(0.25)
                    continue
                marks["first_answer"] = time.monotonic() - began
                return marks
            time.sleep(0.25)
        sys.exit(f"no answer within {limit_s} s:\n{log.read_text()}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def main() -> None:
    """Run the cold starts and print one line each, with the load average."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=18300)
    parser.add_argument("--gpu-port", type=int, default=18301)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--limit", type=float, default=300.0)
    args = parser.parse_args()
    for run in range(args.runs):
        load = os.getloadavg()[0]
        marks = first_answer(args.port, args.gpu_port, args.limit)
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in marks.items())
        print(f"run {run + 1}: load average {load:.2f} at start; {parts}", flush=True)


if __name__ == "__main__":
    main()
