"""Fire-and-forget tasks of this process, kept until they end — the one keeper.

The event loop holds only weak references to its tasks: a task nobody keeps may be collected
before it runs to its end. Work started off a request's critical path (a key's
``last_used_at`` touch in :mod:`accounts.auth`; a circuit-breaker update, a cache store, a
live push or a settlement in :mod:`inference.settlement`) is started with :func:`spawn` (or a
task already made is handed to :func:`keep`), and :func:`pending` is what a draining server
waits for (:func:`inference.settlement.drain`).

Tasks of several event loops may be kept at once (tests run several servers in a process);
:func:`pending` answers per loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

_kept: set[asyncio.Future[Any]] = set()


def keep(task: asyncio.Future[T]) -> asyncio.Future[T]:
    """Keep a reference to ``task`` until it is done; returns it."""
    _kept.add(task)
    task.add_done_callback(_kept.discard)
    return task


def spawn(work: Awaitable[T]) -> asyncio.Future[T]:
    """Run ``work`` on the running loop without waiting for it (after the response), kept
    until it ends. Its exception, if any, is the task's: log inside ``work`` what matters."""
    return keep(asyncio.ensure_future(work))


def pending(loop: asyncio.AbstractEventLoop | None = None) -> set[asyncio.Future[Any]]:
    """The kept tasks not done yet: of ``loop`` when given, else of every loop (safe to call
    from another thread, as a test waiting for a server's loop does)."""
    return {t for t in list(_kept) if not t.done() and (loop is None or t.get_loop() is loop)}
