"""The real gpu-backend server process with the real models (CPU, one thread) for tests.

One server per test session, started as ``python -m inference.gpu_backend`` on a free port on
127.0.0.1; the fixture waits on ``/health`` until every model is ready. Nothing here touches
the database. ``tests/inference/conftest.py`` registers :func:`backend_url` once for every test
under ``tests/inference`` (the gpu-backend's own tests and the gateway's), so a session starts
at most one backend process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 300.0  # the first run converts the GGUF (~25 s); later runs start in seconds


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_cache_dir() -> Path:
    """``$INFRAI_MODEL_CACHE_DIR`` or the project's ``var/models`` (kept between runs)."""
    return Path(os.environ.get("INFRAI_MODEL_CACHE_DIR") or REPO / "var" / "models")


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    """Poll ``/health`` until every model is ready; fail with the server log if it dies/fails."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"gpu-backend exited with {process.returncode}:\n{log.read_text()}")
        try:
            health = httpx.get(url + "/health", timeout=2.0).json()
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        failed = [m for m, s in health["models"].items() if s["state"] == "failed"]
        if failed:
            pytest.fail(f"models failed to load: {failed}\n{log.read_text()}")
        if health["ready"]:
            return dict(health)
        time.sleep(0.2)
    pytest.fail(f"gpu-backend not ready after {READY_TIMEOUT_S} s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def backend_url() -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT``) of a running gpu-backend with all models ready."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="gpu-backend-", suffix=".log")[1])
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable, "-m", "inference.gpu_backend",
        "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
        "--cache-dir", str(model_cache_dir()), "--max-batch", "8", "--log-level", "warning",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.unlink(missing_ok=True)
