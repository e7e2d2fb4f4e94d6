"""``make run``'s supervisor (config.supervisor): production's command lines, readiness, the
order it stops in, a death stopping the rest, and the whole of ``make run`` end to end."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import signal
import subprocess
import sys
import termios
import textwrap
import threading
import time
from pathlib import Path

import openai

from config import services
from config.supervisor import Process, Supervisor, unit_command
from tests.live import free_port, pid_alive

ROOT = Path(__file__).resolve().parents[1]


def test_each_process_runs_its_systemd_units_command_line(tmp_path: Path) -> None:
    py = sys.executable
    web = unit_command("infrai-web@.service", instance="8123", data_dir=tmp_path)
    assert web == [py, "-m", "config.server", "--host", "127.0.0.1", "--port", "8123"]
    worker = unit_command("infrai-worker.service", data_dir=tmp_path)
    assert worker[:4] == [str(Path(py).parent / "celery"), "-A", "config", "worker"]
    beat = unit_command("infrai-beat.service", data_dir=tmp_path)
    assert beat[beat.index("--schedule") + 1] == str(tmp_path / "celerybeat-schedule")
    gpu = unit_command("infrai-gpu@.service", instance="8124", data_dir=tmp_path)
    assert gpu[:3] == [py, "-m", "gpu_backend"]
    assert gpu[gpu.index("--host") + 1] == "127.0.0.1"  # never 0.0.0.0 on a laptop
    assert not any("/opt/infrai" in part or "/var/lib/infrai" in part for part in web + beat)


def _child(
    tmp_path: Path, name: str, *, stop_s: float = 0.0, exit_code: int | None = None
) -> list[str]:
    """A child that prints ``<name> ready``, and on SIGTERM waits ``stop_s`` then records when
    it stopped; with ``exit_code`` it exits at once instead."""
    body = textwrap.dedent(
        f"""
        import signal, sys, time
        if {exit_code!r} is not None:
            print("{name} ready", flush=True)
            sys.exit({exit_code!r})
        def stop(*_):
            time.sleep({stop_s})
            open({str(tmp_path / name)!r}, "w").write(repr(time.monotonic()))
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("{name} ready", flush=True)  # only once a SIGTERM would be recorded
        while True:
            time.sleep(0.05)
        """
    )
    return [sys.executable, "-c", body]


def test_the_web_process_stops_first_and_the_rest_after_it(tmp_path: Path) -> None:
    lines: list[str] = []

    async def scenario() -> None:
        sup = Supervisor({**os.environ}, time.monotonic(), emit=lines.append)
        for name in ("worker", "web", "beat"):
            await sup.start(Process(name, _child(tmp_path, name, stop_s=0.3), ready_line="ready"))
        while not all(p.ready for p in sup.processes):  # noqa: ASYNC110 (set by their output)
            await asyncio.sleep(0.02)
        await sup.stop()
        assert all(p.proc and p.proc.returncode == 0 for p in sup.processes)
        assert sup.failed is None

    asyncio.run(scenario())
    stopped = {name: float((tmp_path / name).read_text()) for name in ("web", "worker", "beat")}
    assert stopped["web"] < stopped["worker"] and stopped["web"] < stopped["beat"]
    assert any(line.startswith("infrai: web ready") for line in lines)
    assert "web   | web ready" in lines


def test_a_process_that_dies_stops_the_others_and_fails_the_run(tmp_path: Path) -> None:
    async def scenario() -> Supervisor:
        sup = Supervisor({**os.environ}, time.monotonic(), emit=lambda _: None)
        web = await sup.start(Process("web", _child(tmp_path, "web"), ready_line="ready"))
        while not web.ready:  # noqa: ASYNC110 (a flag the supervisor sets): its handler is set
            await asyncio.sleep(0.02)
        await sup.start(Process("worker", _child(tmp_path, "worker", exit_code=3)))
        await asyncio.wait_for(sup.stopping.wait(), 30)
        await sup.stop()
        return sup

    sup = asyncio.run(scenario())
    assert sup.failed == "worker exited with status 3"
    assert (tmp_path / "web").exists()  # it was stopped, not left running


def test_a_helper_that_ends_stops_nothing(tmp_path: Path) -> None:
    async def scenario() -> Supervisor:
        sup = Supervisor({**os.environ}, time.monotonic(), emit=lambda _: None)
        await sup.start(Process("web", _child(tmp_path, "web"), ready_line="ready"))
        helper = await sup.start(Process("probe", [sys.executable, "-c", "pass"], essential=False))
        assert helper.proc is not None
        await helper.proc.wait()
        await asyncio.sleep(0.2)
        assert not sup.stopping.is_set()
        await sup.stop()
        return sup

    assert asyncio.run(scenario()).failed is None


class Terminal:
    """A pseudo-terminal whose output is read into ``text`` as it comes (a real terminal
    session: its Ctrl-C is the line discipline's SIGINT to the foreground process group)."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):  # EIO once no process holds the terminal
            while data := os.read(self.master, 65536):
                self.chunks.append(data)

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """``argv`` as a terminal's job: a session of its own with this as its terminal."""

        def take_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        return subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=self.slave, stdout=self.slave, stderr=self.slave,
            start_new_session=True, preexec_fn=take_terminal,
        )  # fmt: skip

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")


def test_make_run_serves_the_readme_snippet_and_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    """``make run`` in a terminal, on a fresh data directory with nothing configured: its own
    PostgreSQL and Redis, the GPU backend, the web process, a Celery worker and beat; the
    README's SDK call; a generation in flight; Ctrl-C: every process gone, no traceback, exit
    status 0 (``make`` itself untouched by the SIGINT); ``billing_audit`` clean."""
    data = tmp_path / "var"
    port, gpu_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env |= {"INFRAI_DATA_DIR": str(data), "PORT": str(port), "GPU_PORT": str(gpu_port)}
    env |= {"INFRAI_GPU_BACKEND_THREADS": "1", "INFRAI_DRAIN_S": "3"}
    terminal = Terminal()
    run = terminal.spawn(["make", "--no-print-directory", "run"], env)
    try:
        deadline = time.monotonic() + 240
        wanted = (
            "infrai: web ready",
            "infrai: worker ready",
            "infrai: beat ready",
            "infrai can answer now",
        )
        while not all(w in terminal.text for w in wanted):
            assert run.poll() is None, terminal.text
            assert time.monotonic() < deadline, terminal.text
            time.sleep(0.5)
        state = services.LocalServices(data / "services").running()
        assert state is not None and str(port) not in state["DATABASE_URL"]
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=(data / "demo_key").read_text().strip(),
            max_retries=0,
            timeout=120,
        )
        resp = client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Say hello."}], max_tokens=20
        )
        assert resp.choices[0].message.content
        assert resp.infrai["vendor"] == "infrai-gpu"  # type: ignore[attr-defined]
        assert float(resp.infrai["cost_usd"]) > 0  # type: ignore[attr-defined]
        pids = [
            int(line.split("=")[1])
            for line in (data / "services" / "urls.env").read_text().splitlines()
            if "_PID=" in line
        ]
        # A long generation in flight when Ctrl-C comes (the spec's no-max_tokens example).
        stream = client.chat.completions.create(
            model="SmolLM2-135M-Instruct",
            messages=[{"role": "user", "content": "Tell me a long story."}],
            stream=True,
            extra_body={"top_k": 40, "repetition_penalty": 1.05},
        )
        next(iter(stream))
        terminal.ctrl_c()
        assert run.wait(timeout=90) == 0, terminal.text
        with contextlib.suppress(openai.APIError):
            for _ in stream:  # the stream ends (drained or cut), it does not hang
                pass
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    terminal.reader.join(timeout=5)
    text = terminal.text
    assert text.index("infrai: stopping") < text.index("infrai: stopped")
    assert "Traceback" not in text
    assert "make: ***" not in text  # no "Interrupt", no "Error 130"
    assert not any(pid_alive(pid) for pid in pids)  # its PostgreSQL and Redis are gone too
    leftovers = subprocess.run(
        ["pgrep", "-f", str(data)], capture_output=True, text=True
    ).stdout.split()
    assert not leftovers
    audit = subprocess.run(
        [sys.executable, "manage.py", "billing_audit"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "open_holds=0 drift=0" in audit.stdout
