"""The calls one server is carrying: one explicit object, owned by the server, per event loop.

:class:`Floor` holds what would otherwise be process-wide globals: the calls that hold money
and are not finished (renewal, drain and the exit hook read them), whether the server drains,
and the task that renews their holds. The production server
(:class:`config.server.DrainingServer`) makes one and hands it to every request through the
ASGI scope's ``state`` (:data:`inference.http.FLOOR_KEY`); for a server that passes none
(daphne), :class:`PerLoop` keeps one per event loop. A call reaches its floor through its
request.

The floor is state only; what is done with it — renewing, draining, billing what a stopped
stream delivered — is money, in :mod:`inference.settlement`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from config.errors import ServiceUnavailable


class Carried(Protocol):
    """What the floor reads of a call it carries (:class:`inference.call.Call`)."""

    finished: bool


C = TypeVar("C", bound=Carried)

SHUTTING_DOWN_CODE = "server_shutting_down"


class Floor(Generic[C]):
    """The money-holding calls of one server on one event loop (see the module docstring)."""

    def __init__(self) -> None:
        self.calls: set[C] = set()
        self.draining = False
        self.renewer: asyncio.Task[None] | None = None

    def refuse_if_draining(self) -> None:
        """503 ``server_shutting_down`` (which the SDKs retry) once the server drains."""
        if self.draining:
            raise ServiceUnavailable(
                "The server is restarting; retry the request.", code=SHUTTING_DOWN_CODE
            )

    def carry(self, call: C) -> None:
        """``call`` holds money from now until it is settled."""
        self.calls.add(call)

    def release(self, call: C) -> None:
        """``call`` is settled (or journaled): nothing more to renew or bill."""
        self.calls.discard(call)

    def unfinished(self) -> list[C]:
        """The calls carried that have not begun their settlement."""
        return [call for call in self.calls if not call.finished]


class PerLoop:
    """One :class:`Floor` per event loop, made on first use (``on_new`` is told of each):
    what :class:`inference.http.V1App` uses under a server that hands it no floor."""

    def __init__(self, on_new: Callable[[Floor[Any]], object]) -> None:
        self._floors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Floor[Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._on_new = on_new

    def __call__(self) -> Floor[Any]:
        loop = asyncio.get_running_loop()
        floor = self._floors.get(loop)
        if floor is None:
            floor = self._floors[loop] = Floor[Any]()
            self._on_new(floor)
        return floor
