"""The real gpu-backend server process with the real models (CPU, one thread) for tests.

One server per test session, started as ``python -m gpu_backend`` on a free port on
127.0.0.1; the fixture waits on ``/health`` until every model is ready. Nothing here touches
the database. ``tests/conftest.py`` registers :func:`backend_url` once for the whole suite (the
gpu-backend's own tests in ``tests/gpu_backend`` and the gateway's), so a session starts at most
one backend process. :func:`gated_backend` runs the same app in this process with its
model loads held behind a gate, for the readiness tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

REPO = Path(__file__).resolve().parents[1]
# The device the session's backend runs on: cpu unless $INFRAI_TEST_DEVICE says cuda (the CUDA
# check, bench/gpu_check.sh, runs these same tests on a GPU).
TEST_DEVICE = os.environ.get("INFRAI_TEST_DEVICE", "cpu")
# The session backend's default output limit (``--default-max-tokens``; 512 in production):
# small, so a test that sets no cap decodes for a second, not half a minute.
TEST_DEFAULT_MAX_TOKENS = 40
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
        sys.executable, "-m", "gpu_backend",
        "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
        "--cache-dir", str(model_cache_dir()), "--max-batch", "8", "--log-level", "warning",
        "--device", TEST_DEVICE, "--default-max-tokens", str(TEST_DEFAULT_MAX_TOKENS),
        # fp32 transformers whatever is installed: exact greedy output, batched equals solo.
        "--cpu-engine", "transformers",
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


class Gate:
    """Holds every model load of a :func:`gated_backend` until :meth:`open` (or fails them all
    with :meth:`fail`), so tests see the server while its models are still loading."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._error: str | None = None

    def open(self) -> None:
        self._event.set()

    def fail(self, error: str = "load cancelled by the test") -> None:
        self._error = error
        self._event.set()

    def wrap(self, loader: Callable[[], Any]) -> Callable[[], Any]:
        def gated() -> Any:
            self._event.wait()
            if self._error is not None:
                raise RuntimeError(self._error)
            return loader()

        return gated


@contextmanager
def gated_backend(
    models: tuple[str, ...], *, load_wait_s: float = 60.0
) -> Iterator[tuple[str, Gate]]:
    """A real gpu-backend app (uvicorn, in this process, CPU, one thread) whose model loads wait
    on the yielded :class:`Gate`; yields its base URL (no ``/v1``) once HTTP answers. On exit the
    gate fails any load still waiting."""
    from gpu_backend.app import create_app
    from gpu_backend.backend import Backend
    from gpu_backend.config import BackendConfig
    from gpu_backend.device import configure_threads

    configure_threads(1)
    gate = Gate()
    backend = Backend(
        BackendConfig(
            threads=1,
            cache_dir=model_cache_dir(),
            models=models,
            max_batch=4,
            load_wait_s=load_wait_s,
        )
    )
    backend._loaders = {m: gate.wrap(loader) for m, loader in backend._loaders.items()}
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(backend), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
    )
    thread = threading.Thread(target=server.run, name="gated-backend", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the gated gpu-backend did not start")
        time.sleep(0.05)
    try:
        yield url, gate
    finally:
        gate.fail()
        server.should_exit = True
        thread.join(timeout=15)
