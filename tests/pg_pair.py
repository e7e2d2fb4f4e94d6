"""A private PostgreSQL primary, migrated, and a streaming replica of it — for the tests of the
read-replica router and of the multi-host topology.

The suite's own database (``DATABASE_URL``) cannot be the primary: the machine's PostgreSQL
allows no replication connection (its ``pg_hba.conf`` grants ``all`` databases, which does
not cover ``replication``), and changing a server the suite did not start is not the suite's
business. So :func:`pg_pair` starts both servers itself, with the binaries of the ``pgserver``
wheel (PostgreSQL 16, the same ones ``config.services`` runs), under ``root``:

- the primary from the install's migrated template (:data:`config.services.TEMPLATE`; initdb
  when there is none), migrated to this checkout with ``manage.py migrate``, listening on
  ``host`` (127.0.0.1, or an address other network namespaces reach) with replication allowed
  from anywhere (trust: a test's private server);
- the replica made by ``pg_basebackup -R`` (a standby streaming from the primary), on its own
  port on the same address, as a hot standby.

Each server takes ~1 s to start here; the base backup of the migrated database ~1 s. Run as
root, the servers run as ``config.services``' unprivileged PostgreSQL user, and every start and
stop makes ``root``'s parents traversable for it again (a pytest session starting beside this
one takes ``/tmp/pytest-of-root`` back to mode 0700).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from config import services

DATABASE = services.DATABASE
_SETTINGS = {
    "max_connections": "200",
    "unix_socket_directories": "''",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "hot_standby": "on",
    # A test's private pair need not survive a power cut.
    "fsync": "off",
    "full_page_writes": "off",
}
_HBA = "host all all 0.0.0.0/0 trust\nhost replication all 0.0.0.0/0 trust\n"


@dataclass
class PgServer:
    """One server of the pair."""

    data: Path
    host: str
    port: int
    run_as: dict[str, Any]

    @property
    def url(self) -> str:
        return f"postgres://postgres@{self.host}:{self.port}/{DATABASE}"

    def connect(self, dbname: str = DATABASE) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, user="postgres", dbname=dbname, autocommit=True
        )

    def start(self) -> None:
        """Start the server (waits until it accepts connections)."""
        options = f"-p {self.port} -c listen_addresses={self.host} " + " ".join(
            f"-c {k}={v}" for k, v in _SETTINGS.items()
        )
        _reachable(self.data, self.run_as)
        argv = ["pg_ctl", "-D", str(self.data), "-l", str(self.data / "server.log"), "-w"]
        _pg([*argv, "-t", "60", "-o", options, "start"], self.run_as)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash would) and wait until it has exited; when
        ``pg_ctl`` cannot, the postmaster of ``postmaster.pid`` is signalled as ``mode`` asks."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        _reachable(self.data, self.run_as)
        argv = ["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"]
        if _pg(argv, self.run_as, check=False) == 0 or not pid_file.exists():
            return
        pid = int(pid_file.read_text().split()[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        deadline = time.monotonic() + 60
        while services.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    @property
    def log(self) -> str:
        """The server's log so far."""
        return (self.data / "server.log").read_text(errors="replace")

    def fetch(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` on this server's database."""
        with self.connect() as conn:
            return conn.execute(sql, params or []).fetchall()


@dataclass
class PgPair:
    """A running primary and its streaming replica."""

    primary: PgServer
    replica: PgServer

    def pause_replay(self) -> None:
        """Stop the replica applying WAL (it keeps receiving it): its reads go stale."""
        self.replica.fetch("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.replica.fetch("SELECT pg_wal_replay_resume()")

    def mark(self) -> None:
        """Commit a transaction on the primary and wait until the replica has replayed it: the
        replica's last replayed commit is then now, so a lag measured from it (``now -
        pg_last_xact_replay_timestamp()``) starts from zero, not from the last write's age."""
        self.primary.fetch("SELECT txid_current()")
        self.wait_caught_up()

    def wait_caught_up(self, timeout_s: float = 30.0) -> None:
        """Wait until the replica has replayed everything the primary has committed so far."""
        # Flushed, not inserted: at a fresh WAL segment the insert position is past the page
        # header, where no record is until the next one comes (up to 15 s on an idle primary).
        (target,) = self.primary.fetch("SELECT pg_current_wal_flush_lsn()::text")[0]
        deadline = time.monotonic() + timeout_s
        while True:
            (done,) = self.replica.fetch("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target])[
                0
            ]
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not catch up")
            time.sleep(0.02)


def _pg(args: list[str], run_as: dict[str, Any], *, check: bool = True) -> int:
    """Run a PostgreSQL program as ``run_as``; its exit status (raises on failure when
    ``check``)."""
    done = subprocess.run(
        [services._pg_bin(args[0]), *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        **run_as,
    )
    if check and done.returncode:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.returncode


def _reachable(path: Path, run_as: dict[str, Any]) -> None:
    """Let PostgreSQL's user reach ``path`` through its parents, when we are root and they do
    not already: a pytest session starting beside this one takes ``/tmp/pytest-of-root`` back
    to mode 0700, so a server under a ``tmp_path`` that was reachable at its start may not be
    at its restart."""
    if not run_as:
        return
    for folder in path.parents:
        mode = folder.stat().st_mode
        if mode & 0o011 != 0o011:
            folder.chmod(mode | 0o011)


def _owned(path: Path, run_as: dict[str, Any]) -> None:
    """``path`` (and everything in it) made PostgreSQL's user's, when we are root."""
    path.chmod(0o700)
    if run_as:
        for p in [path, *path.rglob("*")]:
            os.chown(p, run_as["user"], run_as["group"])


def _primary(root: Path, host: str, redis_url: str) -> PgServer:
    local = services.LocalServices(root / "primary-services", template=services.TEMPLATE)
    local.pgdata.mkdir(parents=True, exist_ok=True)
    run_as = local._as_postgres_user()
    if not local._from_template(run_as):
        argv = ["initdb", "-D", str(local.pgdata), "-U", "postgres", "--auth=trust"]
        _pg([*argv, "--encoding=UTF8", "--no-locale", "--no-sync"], run_as)
    with (local.pgdata / "pg_hba.conf").open("a") as hba:
        hba.write(_HBA)
    _owned(local.pgdata, run_as)
    server = PgServer(local.pgdata, host, services.free_port(), run_as)
    server.start()
    with server.connect("postgres") as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    env = {
        **os.environ,
        "DATABASE_URL": server.url,
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
    }
    env.pop("DATABASE_REPLICA_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=services.REPO,
        env=env,
        check=True,
    )
    return server


def _replica(root: Path, primary: PgServer) -> PgServer:
    data = root / "replica"
    data.mkdir(parents=True)
    _owned(data, primary.run_as)
    _reachable(data, primary.run_as)
    source = ["-h", primary.host, "-p", str(primary.port), "-U", "postgres"]
    options = ["-R", "-X", "stream", "-c", "fast", "--no-sync"]
    _pg(["pg_basebackup", *source, "-D", str(data), *options], primary.run_as)
    (data / "postmaster.pid").unlink(missing_ok=True)
    server = PgServer(data, primary.host, services.free_port(), primary.run_as)
    server.start()
    return server


@contextlib.contextmanager
def pg_pair(root: Path, *, host: str = "127.0.0.1", redis_url: str) -> Iterator[PgPair]:
    """A migrated primary and its streaming replica under ``root``, listening on ``host``,
    stopped and deleted when the block ends. ``redis_url``: a Redis for the settings while
    migrating (the migration sets the catalog version there, under the default key prefix)."""
    root.mkdir(parents=True, exist_ok=True)
    if services.os.geteuid() == 0:
        root.chmod(0o755)
    primary = _primary(root, host, redis_url)
    replica: PgServer | None = None
    try:
        replica = _replica(root, primary)
        pair = PgPair(primary, replica)
        pair.wait_caught_up()
        yield pair
    finally:
        if replica is not None:
            replica.stop("immediate")
        primary.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
