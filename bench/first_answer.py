"""Seconds from ``make run``'s start to "infrai can answer now", and how fast the calls after it
are, on a fresh data directory and then on the same directory reused.

Starts ``scripts/run.sh`` (what ``make run`` runs after its install step) with its own ports and
a new ``INFRAI_DATA_DIR`` (nothing configured: a PostgreSQL and Redis of its own, no demo key
yet), waits for the announcement, then asks the local chat model through the gateway with the
OpenAI SDK ``--calls`` times one after another (8 output tokens each) and prints, per start,
when the announcement came and each call's seconds — the promise being that the first call
after the announcement is as fast as the tenth. Then stops it (SIGINT, as Ctrl-C) and, unless
``--fresh-only``, starts it again on the same directory and measures the same::

    python bench/first_answer.py [--port 18300] [--gpu-port 18301] [--runs 1] [--calls 10]

The install step is not timed (the conversion of the chat model's GGUF happens there, once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
CHAT_MODEL = "SmolLM2-135M-Instruct"
ANNOUNCEMENT = "infrai can answer now"


@dataclass
class Start:
    """One start: seconds to the announcement, then each call's seconds."""

    announced_s: float
    calls_s: list[float] = field(default_factory=list)
    load: float = 0.0

    def line(self, label: str) -> str:
        calls = " / ".join(f"{c:.2f}" for c in self.calls_s)
        rest = sorted(self.calls_s[1:])
        median = rest[len(rest) // 2] if rest else float("nan")
        return (
            f"{label}: load {self.load:.2f}; can answer now at +{self.announced_s:.1f} s; "
            f"calls {calls} s (first {self.calls_s[0]:.2f} s, median of the rest {median:.2f} s)"
        )


def one_start(data_dir: Path, port: int, gpu_port: int, calls: int, limit_s: float) -> Start:
    """Start ``scripts/run.sh`` on ``data_dir``, wait for the announcement, time ``calls``
    calls, stop it with SIGINT."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}},
        "PORT": str(port),
        "GPU_PORT": str(gpu_port),
        "INFRAI_DATA_DIR": str(data_dir),
    }
    log = data_dir.parent / f"{data_dir.name}.log"
    load = os.getloadavg()[0]
    began = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while ANNOUNCEMENT not in log.read_text(errors="replace"):
            if process.poll() is not None:
                sys.exit(f"run.sh exited with {process.returncode}:\n{log.read_text()}")
            if time.monotonic() - began > limit_s:
                sys.exit(f"no announcement within {limit_s} s:\n{log.read_text()}")
            time.sleep(0.1)
        start = Start(announced_s=time.monotonic() - began, load=load)
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=(data_dir / "demo_key").read_text().strip(),
            max_retries=0,
            timeout=120,
        )
        for _ in range(calls):
            sent = time.monotonic()
            client.chat.completions.create(
                model=CHAT_MODEL, messages=[{"role": "user", "content": "Say hi"}], max_tokens=8
            )
            start.calls_s.append(time.monotonic() - sent)
        return start
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def main() -> None:
    """Print one line per start: fresh, then reused (per run)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=18300)
    parser.add_argument("--gpu-port", type=int, default=18301)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--limit", type=float, default=300.0)
    parser.add_argument("--fresh-only", action="store_true")
    args = parser.parse_args()
    for run in range(args.runs):
        root = Path(tempfile.mkdtemp(prefix="infrai-first-answer-"))
        try:
            data_dir = root / "var"
            fresh = one_start(data_dir, args.port, args.gpu_port, args.calls, args.limit)
            print(fresh.line(f"run {run + 1} fresh data directory"), flush=True)
            if not args.fresh_only:
                reused = one_start(data_dir, args.port, args.gpu_port, args.calls, args.limit)
                print(reused.line(f"run {run + 1} reused data directory"), flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
