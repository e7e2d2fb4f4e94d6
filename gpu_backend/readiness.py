"""``make run``'s readiness lines: when the platform can answer, and which local models are ready.

``python -m gpu_backend.readiness --backend URL [--gateway URL] [--public-url URL]
[--since EPOCH] [--wait-for FILE]`` polls the gpu-backend's ``/health`` (and the gateway's
``/healthz``) and prints:

- while nothing can answer yet, a line every ~10 s with each loading model's ETA;
- once the gateway is up and the chat model is ready (the backend warms a model before it says
  so): ``infrai: chat model ready`` (the supervisor starts the workers then);
- once, besides, ``FILE`` exists (the supervisor's sign that the platform's other processes have
  started) and every local model has loaded (or :data:`MODELS_WAIT_S` has passed since the chat
  model was ready): ``infrai can answer now`` with the base URL, the ready models and those
  still loading. Announced earlier, the first calls shared the two cores with Celery's starts
  and the other models' loads (18 s, 13 s, 7 s, 4 s before settling at 0.35 s on a reused data
  directory); now the first call after it is as fast as the tenth;
- one line per model that becomes ready (or fails) after that, then ``all local models ready``.

Exits 0 when every model is ready, 1 when all are done but one failed, or ``--timeout`` passed.
Pure presentation: the server waits for loading models by itself (see ``Backend.service``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from . import CHAT_MODEL_ID

POLL_S = 0.5
MODELS_WAIT_S = 30.0  # the longest the announcement waits for the other models after chat
PROGRESS_EVERY_S = 10.0


def describe(model_id: str, state: dict[str, Any]) -> str:
    """``SmolLM2-135M-Instruct (chat)``."""
    return f"{model_id} ({state.get('kind', '?')})"


def loading_summary(models: dict[str, dict[str, Any]]) -> str:
    """``whisper-tiny.en (transcription) ~3 s, ...`` for the models not ready yet."""
    parts = []
    for model_id, state in models.items():
        if state.get("state") in ("pending", "loading"):
            eta = state.get("eta_s")
            parts.append(describe(model_id, state) + (f" ~{eta:.0f} s" if eta else ""))
    return ", ".join(parts)


@dataclass
class Watcher:
    """The printing state machine, fed one ``/health`` answer at a time (testable offline)."""

    public_url: str
    since: float
    emit: Callable[[str], None] = print
    announced: bool = False
    chat_ready_at: float | None = None
    seen_ready: set[str] = field(default_factory=set)
    seen_failed: set[str] = field(default_factory=set)
    last_progress: float = 0.0

    def elapsed(self, now: float) -> str:
        return f"+{now - self.since:.0f} s"

    def feed(
        self, health: dict[str, Any] | None, gateway_up: bool, now: float, started: bool = True
    ) -> bool | None:
        """Print what changed (``started``: the rest of the platform is up). True once announced
        and every model is ready; False once announced and every model is done but one failed;
        None while there is more to wait for."""
        models: dict[str, dict[str, Any]] = (health or {}).get("models") or {}
        ready = [m for m, s in models.items() if s.get("state") == "ready"]
        for model_id, state in models.items():
            if state.get("state") == "failed" and model_id not in self.seen_failed:
                self.seen_failed.add(model_id)
                self.emit(
                    f"infrai: local model {describe(model_id, state)} FAILED to load: "
                    f"{state.get('error')}"
                )
        chat_ok = CHAT_MODEL_ID in ready or CHAT_MODEL_ID in self.seen_failed
        chat_ok = chat_ok or CHAT_MODEL_ID not in models
        if not self.announced:
            answerable = health is not None and gateway_up and chat_ok and bool(ready)
            if answerable and self.chat_ready_at is None:
                self.chat_ready_at = now
                self.emit(f"infrai: chat model ready ({self.elapsed(now)})")
            loaded = len(ready) + len(self.seen_failed) == len(models)
            waited = self.chat_ready_at is not None and now - self.chat_ready_at >= MODELS_WAIT_S
            if answerable and started and (loaded or waited):
                self.announced = True
                self.seen_ready.update(ready)
                names = ", ".join(describe(m, models[m]) for m in ready)
                self.emit(f"infrai can answer now ({self.elapsed(now)}): {self.public_url}")
                self.emit(f"infrai: ready: {names}")
                rest = loading_summary(models)
                if rest:
                    self.emit(f"infrai: still loading (calls to them wait): {rest}")
            elif now - self.last_progress >= PROGRESS_EVERY_S:
                self.last_progress = now
                if health is None:
                    what = "gpu-backend starting"
                else:
                    what = "loading " + (loading_summary(models) or "nothing")
                gateway = "" if gateway_up else "; gateway starting"
                rest = "" if started else "; workers starting"
                self.emit(f"infrai: not answering yet ({self.elapsed(now)}): {what}{gateway}{rest}")
        else:
            for model_id in ready:
                if model_id not in self.seen_ready:
                    self.seen_ready.add(model_id)
                    self.emit(
                        f"infrai: {describe(model_id, models[model_id])} ready "
                        f"({self.elapsed(now)})"
                    )
        finished = len(ready) + len(self.seen_failed) == len(models)
        if not (self.announced and models and finished):
            return None
        if self.seen_failed:
            failed = ", ".join(sorted(self.seen_failed))
            self.emit(f"infrai: local models ready except {failed} ({self.elapsed(now)})")
            return False
        self.emit(f"infrai: all local models ready ({self.elapsed(now)})")
        return True


def fetch_health(client: httpx.Client, backend: str) -> dict[str, Any] | None:
    """The backend's ``/health`` JSON, or None while it does not answer."""
    try:
        body = client.get(backend.rstrip("/") + "/health").json()
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def gateway_is_up(client: httpx.Client, gateway: str | None) -> bool:
    """Whether the gateway answers its ``/healthz`` (True when no gateway is watched)."""
    if not gateway:
        return True
    try:
        return client.get(gateway.rstrip("/") + "/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Poll until every model is ready (0), one failed (1) or the timeout passed (1)."""
    parser = argparse.ArgumentParser(prog="python -m gpu_backend.readiness")
    parser.add_argument("--backend", required=True, help="gpu-backend base URL (no /v1)")
    parser.add_argument("--gateway", default=None, help="gateway base URL to wait for (/healthz)")
    parser.add_argument("--public-url", default=None, help="the base URL to print")
    parser.add_argument("--since", type=float, default=None, help="start time (unix seconds)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--wait-for", type=Path, default=None, help="announce only once this file exists"
    )
    args = parser.parse_args(argv)
    since = args.since if args.since is not None else time.time()
    watcher = Watcher(
        public_url=args.public_url or args.gateway or args.backend,
        since=since,
        emit=lambda line: print(line, flush=True),
        last_progress=time.time(),
    )
    deadline = time.monotonic() + args.timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            outcome = watcher.feed(
                fetch_health(client, args.backend),
                gateway_is_up(client, args.gateway),
                time.time(),
                started=args.wait_for is None or args.wait_for.exists(),
            )
            if outcome is not None:
                return 0 if outcome else 1
            time.sleep(POLL_S)
    print(f"infrai: local models still not ready after {args.timeout:.0f} s", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
