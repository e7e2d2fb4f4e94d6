"""Slow clients against the real web process (``python -m config.server``, no nginx in front).

The read timeouts of ``config.timeouts``, set small through the environment: a connection that
sends nothing, half a request head, a head one byte at a time, an oversized head, half a body or
a body below the minimum rate is closed by the server, while a normal request on another
connection is answered and a steady upload slower than one window completes. Reading the
request is all that is timed: a stream of server-sent events that lasts many timeouts is
delivered whole.
"""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from subprocess import Popen

import httpx
import pytest

from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import _fake_servers, fake_catalog, fakes  # noqa: F401
from tests.live import ROOT, server_process

pytestmark = pytest.mark.django_db(transaction=True)

# Small enough that the test is quick, large enough for a loaded 2-core machine.
TIMEOUTS = {
    "INFRAI_HEADER_TIMEOUT_S": "1",
    "INFRAI_BODY_TIMEOUT_S": "1",
    "INFRAI_BODY_MIN_RATE_BPS": "200",
}
# How long a test waits for the server to close a connection (many times the timeouts).
CLOSE_WITHIN_S = 30.0


@contextmanager
def served(**env: str) -> Iterator[str]:
    proc: Popen[bytes]
    proc, url = server_process(**{**TIMEOUTS, **env})
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except Exception:
            proc.kill()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=CLOSE_WITHIN_S)


def closed_by_server(sock: socket.socket) -> bytes:
    """Read until the server closes the connection (within :data:`CLOSE_WITHIN_S`); returns
    what it sent before closing. Fails if the connection is still open then."""
    received = b""
    deadline = time.monotonic() + CLOSE_WITHIN_S
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return received
        except TimeoutError:
            raise AssertionError(f"still open after {CLOSE_WITHIN_S} s: {received!r}") from None
        if not chunk:
            return received
        received += chunk


def trickle(sock: socket.socket, byte: bytes, *, every_s: float, at_most: int) -> threading.Thread:
    """Send ``byte`` every ``every_s`` seconds in a thread until the server closes (or
    ``at_most`` bytes were sent)."""

    def run() -> None:
        for _ in range(at_most):
            try:
                sock.send(byte)
            except OSError:
                return
            time.sleep(every_s)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def webhook_head(length: int) -> bytes:
    """A Django route that reads its whole body before the view runs."""
    return (
        f"POST /billing/stripe/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_stalled_heads_and_bodies_are_closed_while_other_requests_are_served() -> None:
    with served() as url:
        hostile: dict[str, socket.socket] = {}
        hostile["silent"] = connect(url)
        hostile["half a head"] = connect(url)
        hostile["half a head"].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        hostile["a head byte by byte"] = connect(url)
        hostile["a head byte by byte"].sendall(b"GET /healthz HTTP/1.1\r\n")
        hostile["half a body"] = connect(url)
        hostile["half a body"].sendall(webhook_head(1000) + b'{"id": ')
        hostile["a body at 5 bytes a second"] = connect(url)
        hostile["a body at 5 bytes a second"].sendall(webhook_head(100_000))
        hostile["the next request's half head"] = connect(url)
        hostile["the next request's half head"].sendall(
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /healthz HTTP/1.1\r\n"
        )
        threads = [
            trickle(hostile["a head byte by byte"], b"x", every_s=0.1, at_most=600),
            trickle(hostile["a body at 5 bytes a second"], b" ", every_s=0.2, at_most=300),
        ]
        oversized = connect(url)
        oversized.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 100_000)

        # Meanwhile, another connection is served.
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200

        for what, sock in hostile.items():
            with sock:
                sent = closed_by_server(sock)
            if what == "the next request's half head":
                assert sent.startswith(b"HTTP/1.1 200"), sent  # the first request was answered
            else:
                assert not sent.startswith(b"HTTP/1.1 2"), (what, sent)
        with oversized:
            assert closed_by_server(oversized).startswith(b"HTTP/1.1 431 ")
        for thread in threads:
            thread.join(CLOSE_WITHIN_S)
            assert not thread.is_alive()
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200


def test_a_steady_upload_slower_than_a_window_but_above_the_floor_is_answered() -> None:
    """3 KB/s for about 2.5 s (2.5 windows of 1 s, 15 times the 200 B/s floor): answered."""
    body = b'{"padding": "' + b"p" * 7_400 + b'"}'
    with served() as url, connect(url) as sock:
        sock.sendall(webhook_head(len(body)))
        for start in range(0, len(body), 300):
            sock.sendall(body[start : start + 300])
            time.sleep(0.1)
        answer = closed_or_answered(sock)
    assert answer.startswith(b"HTTP/1.1 "), answer
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer  # the webhook refuses an unsigned event: it read it all


def closed_or_answered(sock: socket.socket) -> bytes:
    """The first bytes the server sends (a response head), or what it sent before closing."""
    sock.settimeout(CLOSE_WITHIN_S)
    try:
        return sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return b""


def test_a_slow_steady_stream_lasting_many_timeouts_is_delivered_whole(
    issue_key: Callable[..., str],
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
) -> None:
    fake_catalog["primary"].chunk_delay_s = 0.25
    key = issue_key()
    words = " ".join(f"w{i}" for i in range(16))  # about 4 s of stream: 8 header timeouts
    with (
        served(INFRAI_HEADER_TIMEOUT_S="0.5", INFRAI_BODY_TIMEOUT_S="0.5") as url,
        httpx.stream(
            "POST",
            url + "/v1/chat/completions",
            json={
                "model": "test-large",
                "messages": [{"role": "user", "content": words}],
                "stream": True,
            },
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
        ) as response,
    ):
        assert response.status_code == 200
        started = time.monotonic()
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        lasted_s = time.monotonic() - started
    assert lines[-1] == "data: [DONE]", lines[-3:]
    assert not any('"error"' in line for line in lines), lines
    # The premise, not a timing assertion on the server: the stream outlived the timeouts.
    assert lasted_s > 1.0, lasted_s


def test_the_web_process_raises_its_open_files_limit_to_the_hard_limit() -> None:
    """Started under a 256-descriptor soft limit, ``config.server`` lifts it to the hard one
    (the connections a timeout has not closed yet must not starve ``accept``)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("no finite hard limit above 256 to raise to")
    code = "from config.server import raise_open_files_limit; print(raise_open_files_limit())"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
    )
    assert int(done.stdout) == hard
