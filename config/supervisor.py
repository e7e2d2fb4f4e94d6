"""``make run``: production's processes on one machine, under one supervisor, until Ctrl-C.

``python -m config.supervisor [--port 8000] [--gpu-port 8001]``

1. PostgreSQL and Redis: those of ``DATABASE_URL`` / ``REDIS_URL``, else the data directory's
   own (:func:`config.services.serving`, stopped again at the end).
2. The GPU backend first (its model loads overlap everything after it), then one setup step
   (migrations, the demo organization and key, the probe of the local backend) with the web
   process starting beside it, then — once the web process and the chat model are ready — a
   Celery worker and Celery beat. Each runs the ``ExecStart`` of its systemd unit
   under ``deploy/systemd`` (paths made this checkout's, as ``scripts/cluster.sh`` does): the
   same command lines production runs.
3. One line per process once it is ready (the web process's ``/readyz``, the backend's
   ``/health``, the worker's and beat's own "ready" line); every other line of theirs is
   printed with the process's name in front. "infrai can answer now" (``gpu_backend.readiness``)
   waits for the worker and beat too (and the local models' loads): started after it, their
   Django starts took the two cores from the first calls (18 s, 13 s, 7 s, 4 s before settling
   at 0.35 s on a reused data directory), so the first call after the announcement is as fast
   as the tenth.
4. Ctrl-C or SIGTERM: the web process first (it drains its calls in flight for
   ``INFRAI_DRAIN_S``), then the worker, beat and the backend (which ends its generations at
   once), then the servers of step 1. Exit 0. If any process dies meanwhile, the others are
   stopped the same way and the exit status is 1.

Ctrl-C in a terminal signals the whole foreground process group, and ``make`` in it would die
of the SIGINT however cleanly its recipe ends (``make: *** [run] Interrupt``, status 130). So,
started from a terminal's foreground, the supervisor takes the terminal for a process group of
its own, as a shell's job control does (:func:`terminal_foreground`): Ctrl-C reaches it alone,
and ``make run`` exits with its status. Its children run in sessions of their own and never see
the terminal's signals.

honcho (a Procfile runner) was not used: it stops every process at once (no draining web
process first) and knows no readiness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from config import services

REPO = services.REPO
UNITS = REPO / "deploy" / "systemd"
PY = sys.executable
# The setup step (one Django start: each costs seconds on a busy machine). The probe marks the
# local models routable before the gateway starts, so its first catalog snapshot has them.
SETUP = """
import io
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
call_command("bootstrap")
try:
    call_command("catalog", "probe", "--vendor", "infrai-gpu", "--wait", "120",
                 stdout=io.StringIO())
except Exception:
    pass  # the backend is not up yet: the periodic probe marks it later
"""
STOP_GRACE_S = 30.0
# What gpu_backend.readiness prints once the gateway and the chat model are up (before it
# announces that infrai can answer, which waits for the workers too).
CHAT_READY_LINE = "infrai: chat model ready"
# The longest Celery's start waits for the first answer to be possible (the chat model's load).
FIRST_ANSWER_WAIT_S = 60.0


def unit_command(unit: str, *, instance: str = "", data_dir: Path) -> list[str]:
    """The ``ExecStart`` of ``deploy/systemd/<unit>`` for this checkout: ``/opt/infrai`` is the
    repository, ``/var/lib/infrai`` the data directory, ``%i`` is ``instance``, ``%H`` the host
    name, and servers listen on 127.0.0.1 only."""
    text = (UNITS / unit).read_text()
    line = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    line = (
        line.removeprefix("ExecStart=")
        .replace("/opt/infrai/.venv/bin/python", PY)
        .replace("/opt/infrai/.venv/bin/", str(Path(PY).parent) + "/")
        .replace("/opt/infrai/", f"{REPO}/")
        .replace("/var/lib/infrai", str(data_dir))
        .replace("%i", instance)
        .replace("%H", socket.gethostname())
        .replace("--host 0.0.0.0", "--host 127.0.0.1")
    )
    return shlex.split(line)


@dataclass
class Process:
    """A supervised child: its name, command line, and how it says it is ready."""

    name: str
    argv: list[str]
    ready_url: str = ""
    ready_line: str = ""
    essential: bool = True  # its death stops everything (one-off helpers are not)
    proc: asyncio.subprocess.Process | None = None
    ready: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    is_ready: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    def __init__(self, env: dict[str, str], since: float, emit: Callable[[str], None] = print):
        self.env = env
        self.since = since
        self.emit = emit
        self.processes: list[Process] = []
        self.stopping = asyncio.Event()
        self.failed: str | None = None

    def say(self, text: str) -> None:
        self.emit(f"infrai: {text} (+{time.monotonic() - self.since:.1f} s)")

    async def start(self, process: Process) -> Process:
        """Start ``process`` in a session of its own (Ctrl-C reaches only the supervisor, which
        stops the children in order) and follow its output and readiness."""
        process.proc = await asyncio.create_subprocess_exec(
            *process.argv,
            cwd=REPO,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        process.tasks.append(asyncio.create_task(self._relay(process)))
        process.tasks.append(asyncio.create_task(self._watch(process)))
        if process.ready_url:
            process.tasks.append(asyncio.create_task(self._poll(process)))
        return process

    async def _relay(self, process: Process) -> None:
        assert process.proc is not None and process.proc.stdout is not None
        prefix = f"{process.name:<6}| "
        async for raw in process.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if process.ready_line and not process.ready and process.ready_line in line:
                self._ready(process)
            self.emit(prefix + line)

    async def _poll(self, process: Process) -> None:
        async with httpx.AsyncClient(timeout=2) as client:
            while not process.ready:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(process.ready_url)).status_code == 200:
                        self._ready(process)
                        return
                await asyncio.sleep(0.25)

    def _ready(self, process: Process) -> None:
        process.ready = True
        process.is_ready.set()
        if process.essential:
            self.say(f"{process.name} ready")

    async def until(self, event: asyncio.Event, *, timeout_s: float | None) -> None:
        """Wait for ``event``, a stop, or ``timeout_s``, whichever comes first."""
        waits = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.stopping.wait())}
        _, pending = await asyncio.wait(
            waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        for task in pending:
            task.cancel()

    async def _watch(self, process: Process) -> None:
        assert process.proc is not None
        code = await process.proc.wait()
        if process.essential and not self.stopping.is_set():
            self.failed = f"{process.name} exited with status {code}"
            self.stopping.set()

    async def run_once(self, name: str, argv: list[str]) -> int:
        """Run a setup step to its end, its output relayed; returns its exit status."""
        process = await self.start(Process(name, argv, essential=False))
        assert process.proc is not None
        code = await process.proc.wait()
        await asyncio.gather(*process.tasks, return_exceptions=True)
        self.processes.remove(process)
        return code

    async def stop(self) -> None:
        """Helpers and the web process first (drained), then the rest; SIGKILL after a grace."""
        self.stopping.set()  # what exits from here on was stopped, not a death
        live = [p for p in self.processes if p.proc and p.proc.returncode is None]
        first = [p for p in live if p.name == "web" or not p.essential]
        await self._terminate(first, grace_s=float(self.env.get("INFRAI_DRAIN_S", "20")) + 10)
        await self._terminate([p for p in live if p not in first], grace_s=STOP_GRACE_S)
        for process in self.processes:
            for task in process.tasks:
                task.cancel()
        await asyncio.gather(*[t for p in self.processes for t in p.tasks], return_exceptions=True)

    async def _terminate(self, processes: list[Process], *, grace_s: float) -> None:
        for process in processes:
            assert process.proc is not None
            with contextlib.suppress(ProcessLookupError):
                process.proc.send_signal(signal.SIGTERM)
        waits = [asyncio.create_task(p.proc.wait()) for p in processes if p.proc]
        if not waits:
            return
        _, late = await asyncio.wait(waits, timeout=grace_s)
        if late:
            for process in processes:
                if process.proc and process.proc.returncode is None:
                    self.say(f"{process.name} did not stop in {grace_s:.0f} s: killed")
                    with contextlib.suppress(ProcessLookupError):
                        process.proc.kill()
            await asyncio.wait(late)


async def supervise(port: int, gpu_port: int, env: dict[str, str], since: float) -> int:
    """Start everything, wait for Ctrl-C / SIGTERM or a death, stop everything in order."""
    sup = Supervisor(env, since)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, sup.stopping.set)
    data_dir = Path(env["INFRAI_DATA_DIR"])
    started = data_dir / "started"  # written once every process is up (see the docstring)
    started.unlink(missing_ok=True)
    base = f"http://127.0.0.1:{port}"
    own = contextlib.ExitStack()
    try:
        # The GPU backend before anything else (it needs neither PostgreSQL nor Redis): its
        # model loads are the longest part of a first start.
        await sup.start(
            Process(
                "gpu",
                unit_command("infrai-gpu@.service", instance=str(gpu_port), data_dir=data_dir),
                ready_url=f"http://127.0.0.1:{gpu_port}/health",
            )
        )
        env.update(await asyncio.to_thread(own.enter_context, services.serving(data_dir)))
        setup = asyncio.create_task(
            sup.run_once("setup", [PY, "manage.py", "shell", "--no-imports", "-c", SETUP])
        )
        # The web process beside the setup step: its start (imports, no database) overlaps the
        # migrations; nothing calls it before the setup has printed the demo key.
        argv = unit_command("infrai-web@.service", instance=str(port), data_dir=data_dir)
        web = await sup.start(Process("web", argv, ready_url=f"{base}/readyz"))
        stop_wait = asyncio.create_task(sup.stopping.wait())
        await asyncio.wait({setup, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not setup.done():
            setup.cancel()
        elif setup.result() != 0:
            sup.failed = f"setup exited with status {setup.result()}"
            sup.stopping.set()
        if not sup.stopping.is_set():
            readiness = [PY, "-m", "gpu_backend.readiness"]
            readiness += ["--backend", f"http://127.0.0.1:{gpu_port}", "--gateway", base]
            readiness += [
                "--public-url",
                env["INFRAI_PUBLIC_BASE_URL"],
                "--since",
                str(time.time() - (time.monotonic() - since)),
                "--wait-for",
                str(started),
            ]
            answers = await sup.start(
                Process("ready", readiness, essential=False, ready_line=CHAT_READY_LINE)
            )
            sup.emit(f"infrai: serving on {base} (Ctrl-C stops)")
            # Celery and the other vendors' probe once the web process and the chat model are
            # up: three more Django starts before would compete for the cores with them.
            await sup.until(web.is_ready, timeout_s=None)
            await sup.until(answers.is_ready, timeout_s=FIRST_ANSWER_WAIT_S)
        if not sup.stopping.is_set():
            worker = unit_command("infrai-worker.service", data_dir=data_dir)
            celery = [await sup.start(Process("worker", worker, ready_line="worker ready"))]
            beat = unit_command("infrai-beat.service", data_dir=data_dir)
            celery.append(await sup.start(Process("beat", beat, ready_line="beat ready")))
            probe = [PY, "manage.py", "catalog", "probe", "--wait", "300"]
            await sup.start(Process("probe", probe, essential=False))
            for process in celery:
                await sup.until(process.is_ready, timeout_s=FIRST_ANSWER_WAIT_S)
            started.touch()  # the announcement may come now
        await sup.stopping.wait()
    finally:
        sup.say(f"stopping ({sup.failed})" if sup.failed else "stopping")
        await sup.stop()
        await asyncio.to_thread(own.close)  # infrai's own servers last
    sup.say("stopped")
    return 1 if sup.failed else 0


@contextlib.contextmanager
def terminal_foreground() -> Iterator[None]:
    """While inside, this process leads the controlling terminal's foreground process group
    (Ctrl-C is sent to it alone, not to a ``make`` that started it); the previous foreground
    group gets the terminal back on exit. Does nothing without a terminal, or when this
    process is not in the foreground (started in the background, under a pipe's reader)."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        yield
        return
    try:
        previous = os.tcgetpgrp(tty)
        if previous != os.getpgrp() or os.getpid() == os.getsid(0):
            yield
            return
        os.setpgid(0, 0)
        _hand_terminal(tty, os.getpgrp())
        try:
            yield
        finally:
            _hand_terminal(tty, previous)
    finally:
        os.close(tty)


def _hand_terminal(tty: int, group: int) -> None:
    """Make ``group`` the foreground of ``tty`` (a background group asking gets SIGTTOU,
    which is ignored for the call)."""
    handler = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):  # the group or the terminal is gone
            os.tcsetpgrp(tty, group)
    finally:
        signal.signal(signal.SIGTTOU, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.supervisor")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--gpu-port", type=int, default=int(os.environ.get("GPU_PORT", "8001")))
    args = parser.parse_args(argv)
    since = time.monotonic()
    data_dir = services.data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "INFRAI_DATA_DIR": str(data_dir)}
    env.setdefault("INFRAI_PUBLIC_BASE_URL", f"http://127.0.0.1:{args.port}/v1")
    env.setdefault("INFRAI_GPU_BACKEND_URL", f"http://127.0.0.1:{args.gpu_port}/v1")
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    env.setdefault("PYTHONUNBUFFERED", "1")
    with terminal_foreground():
        return asyncio.run(supervise(args.port, args.gpu_port, env, since))


if __name__ == "__main__":
    sys.exit(main())
