"""A stop of the model server (SIGTERM from the supervisor or systemd, Ctrl-C) ends the
generations in flight at once — their clients get a 503 they can retry elsewhere — and the
process exits cleanly, instead of decoding on for minutes for a gateway that has gone."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.gpu import REPO, free_port, model_cache_dir, wait_until_ready

MODEL = "SmolLM2-135M-Instruct"
ENDLESS = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 4000,
    "temperature": 1.0,
    "logit_bias": {"0": -100, "2": -100},  # <|endoftext|>, <|im_end|>: it never ends by itself
}


def test_a_stop_ends_the_generations_in_flight_and_exits_cleanly(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "backend.log"
    command = [
        sys.executable, "-m", "gpu_backend", "--port", str(port), "--threads", "1",
        "--cache-dir", str(model_cache_dir()), "--models", MODEL, "--device", "cpu",
        "--cpu-engine", "transformers",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log)
        streamed: list[str] = []
        started = threading.Event()
        whole: dict[str, httpx.Response] = {}

        def stream() -> None:
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json={**ENDLESS, "stream": True}, timeout=60
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        streamed.append(line[len("data: ") :])
                        started.set()

        def answer() -> None:
            whole["r"] = httpx.post(url + "/v1/chat/completions", json=ENDLESS, timeout=60)

        threads = [threading.Thread(target=stream), threading.Thread(target=answer)]
        for thread in threads:
            thread.start()
        assert started.wait(60)
        process.send_signal(signal.SIGTERM)
        # uvicorn ends by re-raising the signal it stopped for (systemd's clean stop).
        assert process.wait(timeout=30) == -signal.SIGTERM, log.read_text()
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    error = json.loads(streamed[-1])["error"]
    assert error["code"] == "server_shutting_down"
    assert whole["r"].status_code == 503
    assert whole["r"].json()["error"]["code"] == "server_shutting_down"
    assert "Traceback" not in log.read_text()
