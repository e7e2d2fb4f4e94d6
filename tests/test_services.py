"""infrai's own PostgreSQL and Redis (config.services): started, found again, stopped."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
import redis

from config.services import LocalServices, serving
from tests.live import pid_alive


def _pids_alive(services: LocalServices) -> list[int]:
    state = dict(
        line.split("=", 1) for line in services.state.read_text().splitlines() if "=" in line
    )
    return [pid for pid in (int(state["POSTGRES_PID"]), int(state["REDIS_PID"])) if pid_alive(pid)]


def test_own_servers_start_answer_are_found_again_and_stop(tmp_path: Path) -> None:
    services = LocalServices(tmp_path / "services", throwaway=True)
    assert services.running() is None
    urls = services.start()
    try:
        with psycopg.connect(urls["DATABASE_URL"]) as conn:
            extensions = conn.execute("SELECT name FROM pg_available_extensions").fetchall()
            assert ("vector",) in extensions  # the vector store's pgvector engine can run here
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert redis.Redis.from_url(urls["REDIS_URL"]).ping()
        assert services.running() == urls
        assert services.start() == urls  # a second start finds them running
        pids = _pids_alive(services)
        assert len(pids) == 2
    finally:
        services.stop()
    assert services.running() is None
    assert all(not pid_alive(pid) for pid in pids)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(urls["DATABASE_URL"], connect_timeout=2)


def test_serving_starts_nothing_when_both_urls_are_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://elsewhere/db")
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/0")
    with serving(tmp_path) as urls:
        assert urls == {}
    assert not (tmp_path / "services").exists()


def test_serving_uses_running_servers_and_leaves_them_to_their_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    with serving(tmp_path, throwaway=True) as owned:
        with serving(tmp_path) as borrowed:  # a manage.py command beside `make run`
            assert borrowed == owned
        services = LocalServices(tmp_path / "services")
        assert services.running() == owned  # still up: the borrower did not stop them
    assert services.running() is None


def test_run_hands_its_command_the_callers_environment_not_configs_defaults(
    tmp_path: Path,
) -> None:
    """``make test`` runs pytest through ``config.services run``: had the settings default that
    importing ``config`` sets leaked into pytest's environment, it would beat pytest-django's
    ``config.settings.test`` and the suite would run on the local settings."""
    import subprocess
    import sys

    show = [sys.executable, "-c", "import os; print(os.environ.get('DJANGO_SETTINGS_MODULE'))"]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    run = [sys.executable, "-m", "config.services", "run", "--data-dir", str(tmp_path), "--"]
    out = subprocess.run([*run, *show], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    out = subprocess.run([*run, *show], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "config.settings.test"


def test_a_configured_url_is_kept_when_only_the_other_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/9")
    with serving(tmp_path, throwaway=True) as urls:
        assert set(urls) == {"DATABASE_URL"}  # the caller's Redis stays the caller's
        with psycopg.connect(urls["DATABASE_URL"]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
