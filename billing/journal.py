"""The settlement journal: what a finished call owes while PostgreSQL cannot take it.

A call's settlement (its request-log row and the hold's charge, one statement, made by
:mod:`inference.pipeline`, which hands it here: billing never imports the request path) is
retried on fresh connections for ``INFRAI_SETTLE_RETRY_S``. When the database still refuses,
the settlement — the row's values, whether it holds money, the cost — is appended here before
the call's answer ends, and this process replays it until PostgreSQL accepts it
(:func:`replay`, on every tick of the hold renewer). Replaying is safe to repeat: the
settlement claims a hold at most once and the row's insert keeps a row already written.

Why a local append-only file (``docs/billing.md`` has the failure analysis): the journal must
work exactly when the shared services do not. PostgreSQL is the thing that failed; Redis is
another network service, not durable as deployed (no AOF) and down in the same outages
(network, host). An ``fsync``'d line on the process's own disk has no dependency the database
has: it costs one ``write`` + ``fsync`` (about 1-4 ms here), only on the failure path.

One file per process, ``<INFRAI_JOURNAL_DIR>/<database name>/<process token>.jsonl``, held under an
exclusive ``flock`` for the process's life. A file whose lock can be taken belongs to a process
that is gone (the kernel drops the lock with the process, SIGKILL included): any process of the
host adopts it (:func:`replay` with ``orphans=True``; the ``billing.replay_journals`` beat
task), replays it and deletes it. Lines are JSON objects: ``{"intent": …}`` for a settlement,
``{"done": request_id}`` once it is in PostgreSQL; a file is truncated once nothing in it is
pending. The directory is per database, so a journal is only ever replayed into the database
its calls were held in.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings

from billing.services import process_token
from infra import outages

log = logging.getLogger(__name__)

# How often the replay looks for journals of processes that are gone.
ORPHAN_SCAN_S = 30.0


@dataclass(frozen=True, slots=True)
class Intent:
    """One settlement to make: the request-log row's field values (``attname`` → value), whether
    the call holds money, and what to charge (nano-USD)."""

    row: dict[str, Any]
    held: bool
    cost: int

    @property
    def request_id(self) -> str:
        return str(self.row["request_id"])

    def line(self) -> bytes:
        return orjson.dumps({"intent": {"row": self.row, "held": self.held, "cost": self.cost}})

    @classmethod
    def of(cls, data: dict[str, Any]) -> Intent:
        row = dict(data["row"])
        if isinstance(row.get("created_at"), str):
            row["created_at"] = dt.datetime.fromisoformat(row["created_at"])
        return cls(row=row, held=bool(data["held"]), cost=int(data["cost"]))


class JournalFile:
    """One journal file, locked by this process (its own, or one adopted from a dead one)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._lock = threading.Lock()

    @classmethod
    def lock(cls, path: Path, *, create: bool) -> JournalFile | None:
        """``path`` opened and locked; ``None`` when another process holds it (or it vanished)."""
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if not create and not path.exists():  # deleted by its adopter meanwhile
            os.close(fd)
            return None
        return cls(path, fd)

    def append(self, *lines: bytes) -> None:
        """Write ``lines`` and wait for the disk (raises ``OSError`` if it cannot)."""
        data = b"".join(line + b"\n" for line in lines)
        with self._lock:
            os.write(self._fd, data)
            os.fsync(self._fd)

    def pending(self) -> list[Intent]:
        """The intents of this file not yet marked done (a torn last line is skipped)."""
        with self._lock:
            return self._pending()

    def _pending(self) -> list[Intent]:
        raw = self.path.read_bytes()
        intents: dict[str, Intent] = {}
        for line in raw.splitlines():
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if "intent" in entry:
                intent = Intent.of(entry["intent"])
                intents[intent.request_id] = intent
            elif "done" in entry:
                intents.pop(str(entry["done"]), None)
        return list(intents.values())

    def truncate_if_settled(self) -> None:
        """Empty the file if nothing in it is pending — checked under the lock its appends
        take, so an intent appended since the replay read the file is never lost."""
        with self._lock:
            if not self._pending():
                os.ftruncate(self._fd, 0)
                os.fsync(self._fd)

    def remove(self) -> None:
        """Delete the file (an adopted journal, replayed in full) and let go of it."""
        with self._lock:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)


_own: dict[tuple[int, Path], JournalFile] = {}
_own_lock = threading.Lock()
_last_orphan_scan = 0.0
_replaying: set[asyncio.AbstractEventLoop] = set()


def directory() -> Path:
    """This database's journal directory, named after the database alone (tests' database
    names apply): processes that reach it by different addresses (a pooler, a proxy) share
    it."""
    name = str(settings.DATABASES["default"].get("NAME") or "default")
    return Path(settings.INFRAI_JOURNAL_DIR) / name.replace("/", "_")


def _own_file() -> JournalFile:
    folder = directory()
    key = (os.getpid(), folder)
    with _own_lock:
        journal = _own.get(key)
        if journal is None:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / f"{process_token().replace(':', '_')}.jsonl"
            journal = JournalFile.lock(path, create=True)
            if journal is None:
                raise OSError(f"journal {path} is locked by another process")
            _own[key] = journal
        return journal


def _existing_own() -> JournalFile | None:
    return _own.get((os.getpid(), directory()))


async def append(intent: Intent) -> None:
    """Keep ``intent`` on disk until :func:`replay` has made it (raises ``OSError``)."""
    await asyncio.to_thread(lambda: _own_file().append(intent.line()))


def _orphans() -> Iterator[JournalFile]:
    """Journal files of this database whose process is gone, each locked for adoption."""
    folder = directory()
    if not folder.is_dir():
        return
    own = _existing_own()
    for path in sorted(folder.glob("*.jsonl")):
        if own is not None and path == own.path:
            continue
        adopted = JournalFile.lock(path, create=False)
        if adopted is not None:
            yield adopted


async def _replay_file(
    journal: JournalFile, settle: Callable[[Intent], Awaitable[None]], *, adopted: bool
) -> int:
    """Make ``journal``'s pending intents; returns how many are still pending."""
    pending = await asyncio.to_thread(journal.pending)
    left = 0
    for intent in pending:
        try:
            await settle(intent)
        except Exception as exc:
            left += 1
            if not outages.noted(exc):
                log.exception("journal: could not replay the settlement of %s", intent.request_id)
            continue
        await asyncio.to_thread(journal.append, orjson.dumps({"done": intent.request_id}))
        log.warning("journal: settled %s (%s nano-USD)", intent.request_id, intent.cost)
    if left == 0:
        await asyncio.to_thread(journal.remove if adopted else journal.truncate_if_settled)
    return left


async def replay(settle: Callable[[Intent], Awaitable[None]], *, orphans: bool = False) -> int:
    """Make this process's pending settlements with ``settle`` — and, with ``orphans`` (or once
    every :data:`ORPHAN_SCAN_S`), those of this host's processes that are gone. Returns how
    many are still pending. One replay at a time per event loop."""
    global _last_orphan_scan
    loop = asyncio.get_running_loop()
    if loop in _replaying:
        return 0
    _replaying.add(loop)
    try:
        left = 0
        own = _existing_own()
        if own is not None and own.path.stat().st_size:
            left += await _replay_file(own, settle, adopted=False)
        now = time.monotonic()
        if orphans or now - _last_orphan_scan >= ORPHAN_SCAN_S:
            _last_orphan_scan = now
            for journal in await asyncio.to_thread(lambda: list(_orphans())):
                left += await _replay_file(journal, settle, adopted=True)
        return left
    finally:
        _replaying.discard(loop)


def pending_everywhere() -> dict[str, int]:
    """Pending intents per journal file of this database on this host (the audit reads it;
    files locked by a running process are read too, without taking their lock)."""
    folder = directory()
    if not folder.is_dir():
        return {}
    counts: dict[str, int] = {}
    for path in sorted(folder.glob("*.jsonl")):
        try:
            count = len(JournalFile(path, -1).pending())
        except FileNotFoundError:
            continue
        if count:
            counts[path.name] = count
    return counts
