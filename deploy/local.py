"""The gateway's processes on this machine, for measurements and tests: production settings
with placeholder secrets (:func:`production_env`), ``manage.py`` (:func:`manage`), the
production topology (:func:`cluster`), and a graceful stop of what was started (:func:`stop`).

Used by ``deploy/measure.py`` and ``bench/compare.py``; tests of the production topology or
settings can use it too. Standard library only; importable as ``deploy.local`` with the
repository on ``sys.path`` (the test runner puts it there, the scripts do).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Long enough for ``check --deploy``; never a real deployment's values.
SECRET_KEY = "local-production-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
KEY_PEPPER = "local-production-pepper-0123456789abcdefghijklmnopqrstuvwxyz"


def production_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """This process's environment with ``config.settings.production`` and every secret it
    requires filled with a placeholder, files under ``data_dir``, then ``settings`` on top
    (``DATABASE_URL``, ``BASE_PORT`` …)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "INFRAI_KEY_PEPPER": KEY_PEPPER,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STRIPE_SECRET_KEY": "sk_test_local",
        "STRIPE_WEBHOOK_SECRET": "whsec_local",
        "INFRAI_DATA_DIR": str(data_dir),
        **settings,
    }


def manage(
    env: dict[str, str], *args: str, check: bool = True, timeout_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py *args`` of this repository under ``env``, by this interpreter, its output
    captured as text. A non-zero exit raises ``CalledProcessError`` when ``check``."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        check=check,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def stop(proc: subprocess.Popen[Any], *, sig: int = signal.SIGTERM, grace_s: float = 30.0) -> None:
    """Send ``sig`` to ``proc`` if it still runs and wait ``grace_s`` for it to exit; kill it
    after that. Returns once it has exited."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def cluster(
    env: dict[str, str], base_port: int, directory: Path, *, limit_s: float = 240.0, **settings: str
) -> Iterator[subprocess.Popen[str]]:
    """``scripts/cluster.sh`` under ``env`` and ``settings`` (nginx on ``base_port``, the web
    processes on the ports after it; its logs and pid files in ``directory``; the database
    already migrated), yielded once it says it is ready; stopped (SIGTERM) on leaving.

    Raises ``RuntimeError`` with what it printed when it exits, or is not ready within
    ``limit_s``, first.
    """
    proc = subprocess.Popen(
        ["bash", "scripts/cluster.sh"],
        cwd=ROOT,
        env={
            **env,
            "BASE_PORT": str(base_port),
            "CLUSTER_DIR": str(directory),
            "CLUSTER_MIGRATE": "0",
            **settings,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline, printed = time.monotonic() + limit_s, []
        while not printed or not printed[-1].startswith("cluster ready"):
            line = proc.stdout.readline()
            if (not line and proc.poll() is not None) or time.monotonic() > deadline:
                raise RuntimeError("the cluster did not start:\n" + "".join(printed))
            printed.append(line)
        yield proc
    finally:
        stop(proc, grace_s=60)
