"""A TCP relay on 127.0.0.1 that a test can cut and restore: a network partition between a
process and a real server (PostgreSQL), with nothing of either mocked.

``cut()`` resets every relayed connection and refuses new ones (the listening socket closes, so
a connect fails with ``ECONNREFUSED``, as with a server host that went away); ``restore()``
listens on the same port again.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator


class Relay:
    """``127.0.0.1:<port>`` → ``target``, one thread per direction per connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self.restore()

    def restore(self) -> None:
        """Accept connections again (on the same port)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Reset every relayed connection and refuse new ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            doomed, self._sockets = self._sockets, set()
        for sock in doomed:
            _reset(sock)

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _reset(client)
                    _reset(upstream)
                    continue
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with self._lock:
                self._sockets.discard(sock)
            _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a RST (SO_LINGER 0), as a dropped connection arrives."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def relay(target: tuple[str, int]) -> Iterator[Relay]:
    """A :class:`Relay` to ``target`` for the block."""
    r = Relay(target)
    try:
        yield r
    finally:
        r.close()
