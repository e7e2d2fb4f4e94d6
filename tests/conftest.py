"""Fixtures shared by the whole suite."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db.backends.postgresql.operations import DatabaseOperations

from accounts.auth import _touched_at
from infra import background, fastcache
from tests.gpu import backend_url  # noqa: F401  (one gpu-backend process per session, all folders)
from tests.live import daphne_server, uvicorn_server


def _delete_flush(
    self: DatabaseOperations,
    style: Any,
    tables: Sequence[str],
    *,
    reset_sequences: bool = False,
    allow_cascade: bool = False,
) -> list[str]:
    """The test database's flush after each ``transactional_db`` test as ``DELETE``s with
    triggers and foreign-key checks off for the transaction (``session_replication_role =
    replica``; the ledger's append-only trigger allows only its owner's ``TRUNCATE``), in place
    of Django's one ``TRUNCATE`` of every table. Same rows left (none), same sequences (not
    reset either way), far less work for a handful of rows: measured on this machine's
    PostgreSQL 15 (fsync on) over the 49 tables, ``TRUNCATE`` 2.0–2.8 s per flush against
    3–26 ms for the ``DELETE``s — with hundreds of such tests, most of the suite's time. And
    ``DELETE`` takes no ACCESS EXCLUSIVE lock, so a server's after-answer write still running
    waits for the flush instead of deadlocking with it. A flush that resets sequences, or a
    role that may not set the replication role, gets Django's own."""
    if reset_sequences or not tables or not _may_replicate(self.connection):
        return _TRUNCATE_FLUSH(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )
    return [
        "SET LOCAL session_replication_role = replica",
        *(f"DELETE FROM {self.quote_name(table)}" for table in tables),
    ]


def _may_replicate(connection: Any) -> bool:
    """Whether the connection's role may set ``session_replication_role`` (a superuser)."""
    with connection.cursor() as cur:
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
    return bool(row and row[0])


_TRUNCATE_FLUSH = DatabaseOperations.sql_flush
DatabaseOperations.sql_flush = _delete_flush  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    cache.clear()
    fastcache.clear_sync()
    _touched_at.clear()
    yield


@pytest.fixture(scope="session", autouse=True)
def _journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Settlement journals (billing.journal) of this run, its servers' included, in a directory
    of its own: never one a stopped earlier run left behind."""
    from django.conf import settings

    folder = tmp_path_factory.mktemp("journal")
    before = os.environ.get("INFRAI_JOURNAL_DIR")
    os.environ["INFRAI_JOURNAL_DIR"] = str(folder)
    settings.INFRAI_JOURNAL_DIR = folder
    yield
    if before is None:
        os.environ.pop("INFRAI_JOURNAL_DIR", None)
    else:
        os.environ["INFRAI_JOURNAL_DIR"] = before


@pytest.fixture(scope="session")
def _no_stray_connections(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    """Before the test database is dropped, end the sessions servers left on it (a server's
    async pool on a loop that stopped without closing it would block ``DROP DATABASE``)."""
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(scope="session")
def live_url(_no_stray_connections: None) -> Iterator[str]:
    """Base URL of the real ASGI app served by the production server, uvicorn
    (``http://127.0.0.1:PORT``)."""
    with uvicorn_server() as url:
        yield url


@pytest.fixture(scope="session")
def daphne_url(_no_stray_connections: None) -> Iterator[str]:
    """The same app served by daphne (Channels' development server), for a smoke test."""
    with daphne_server() as url:
        yield url


@pytest.fixture
def api_base(live_url: str, transactional_db: None) -> Iterator[str]:
    """The ``/v1`` base URL for the OpenAI SDK; rows the test writes are visible to the server.

    On teardown it waits (up to 10 s) for the work the server started after its answers (a
    key's ``last_used_at`` touch, a settlement, a cache store): the test database's flush
    truncates every table, and a query of that work still running would deadlock with it."""
    yield live_url + "/v1"
    deadline = time.monotonic() + 10.0
    while background.pending() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def issue_key(db: None) -> Callable[..., str]:
    """``issue_key(org=…, project=…, credit_usd=…)`` through the real management command."""

    def issue(org: str = "acme", project: str = "default", credit_usd: str = "5") -> str:
        out = io.StringIO()
        call_command("issue_key", org=org, project=project, credit_usd=credit_usd, stdout=out)
        return out.getvalue().strip().splitlines()[-1]

    return issue
