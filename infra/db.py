"""Running ORM code from async code on the ``/v1`` hot path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


def db_async(fn: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``fn`` as a coroutine function run in the thread pool, not the one shared DB thread.

    ``thread_sensitive=False``: concurrent calls do not queue behind each other (Channels'
    default serialises every DB call of the process on one thread). After each call the
    thread's connection is handed back (to the psycopg pool on PostgreSQL), so idle pool
    threads never pin connections.
    """

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False)  # type: ignore[return-value]
