"""The web process behind PgBouncer in transaction mode (Debian's 1.18, which keeps no prepared
statement across transactions): every call answered and settled exactly once, the audit clean.

The pooler here has two server connections for all its clients, so a client's consecutive
transactions run wherever the pooler puts them and a statement one of them prepared may be
missing, or already taken by another process, on the next: the first test shows the hazard
(deterministically: two processes prepare the same statement name on one server connection);
``INFRAI_DB_POOLER=transaction`` is what makes the platform work behind it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings

from billing.audit import audit_findings
from billing.models import EntryKind, Hold, HoldStatus, LedgerEntry
from inference.models import RequestLog, RequestStatus
from tests.live import free_port, server_process, wait_for

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def pgbouncer() -> Iterator[int]:
    """PgBouncer on a free port in transaction mode in front of the test's PostgreSQL, with two
    server connections per database and user (fewer than its clients: consecutive transactions
    of one client land on either); yields its port."""
    db = settings.DATABASES["default"]
    folder = Path(tempfile.mkdtemp(prefix="infrai-pgbouncer-"))
    folder.chmod(0o755)  # it drops root for the postgres user, who must read its files
    port = free_port()
    user = db.get("USER") or "postgres"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={db.get('HOST') or '127.0.0.1'} port={db.get('PORT') or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    argv = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", "postgres"]  # PgBouncer refuses to run as root
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _listening(port), seconds=10)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


# One process's query through the pooler, as a separate program: asyncpg names its prepared
# statements by a per-process counter, so two processes both prepare "__asyncpg_stmt_1__".
_ONE_QUERY = """
import asyncio, sys, asyncpg
async def main():
    conn = await asyncpg.connect(sys.argv[1], statement_cache_size=int(sys.argv[2]))
    print(await conn.fetchval("SELECT $1::int + 1", 1))
    await conn.close()
asyncio.run(main())
"""


def _one_query(url: str, cache: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _ONE_QUERY, url, str(cache)], capture_output=True, text=True
    )


@pytest.mark.django_db(transaction=True)
def test_behind_the_pooler_a_statement_cache_breaks_and_none_works(pgbouncer):
    db = settings.DATABASES["default"]
    url = f"postgres://{db.get('USER') or 'postgres'}@127.0.0.1:{pgbouncer}/{db['NAME']}"
    first, second = _one_query(url, 100), _one_query(url, 100)  # asyncpg's default cache
    assert first.returncode == 0
    assert second.returncode != 0 and "already exists" in second.stderr  # the hazard is real
    assert [_one_query(url, 0).stdout.strip() for _ in range(2)] == ["2", "2"]


@pytest.mark.django_db(transaction=True)
def test_calls_behind_pgbouncer_in_transaction_mode_settle_exactly_once(
    pgbouncer, issue_key, fake_catalog, tmp_path: Path
) -> None:
    db = settings.DATABASES["default"]
    url = f"postgres://{db.get('USER') or 'postgres'}@127.0.0.1:{pgbouncer}/{db['NAME']}"
    key = issue_key()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as sink:
        proc, base = server_process(DATABASE_URL=url, INFRAI_DB_POOLER="transaction", output=sink)
    client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    failures: list[BaseException] = []
    request_ids: list[str] = []
    lock = threading.Lock()

    def calls(count: int) -> None:
        for index in range(count):
            try:
                if index % 3 == 2:
                    with client.chat.completions.with_streaming_response.create(
                        model="test-large", messages=messages, stream=True
                    ) as streamed:
                        rid = streamed.headers["x-infrai-request-id"]
                        assert "[DONE]" in streamed.read().decode()
                else:
                    raw = client.chat.completions.with_raw_response.create(
                        model="test-large", messages=messages
                    )
                    rid = raw.headers["x-infrai-request-id"]
                    assert raw.parse().infrai["cost_nanos"] > 0  # type: ignore[attr-defined]
                with lock:
                    request_ids.append(rid)
            except BaseException as exc:  # collected: a thread's failure must fail the test
                with lock:
                    failures.append(exc)

    try:
        threads = [threading.Thread(target=calls, args=(6,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert httpx.get(base + "/readyz", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert failures == []
    assert len(request_ids) == 24
    rows = RequestLog.objects.filter(request_id__in=request_ids)
    assert rows.count() == 24 and {r.status for r in rows} == {RequestStatus.OK}
    charged = LedgerEntry.objects.filter(kind=EntryKind.USAGE, request_id__in=request_ids)
    assert charged.count() == 24
    assert {e.request_id: -e.amount_nanos for e in charged} == {
        r.request_id: r.cost_nanos for r in rows
    }
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []
    text = log_path.read_text()
    assert "prepared statement" not in text and "Traceback" not in text, text[-3000:]
