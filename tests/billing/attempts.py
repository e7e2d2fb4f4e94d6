"""Holds opened from many threads at once, each outcome recorded (the concurrency tests and the
worker process of :mod:`tests.billing.hold_worker`).

Import it only once Django is set up: it imports the billing services.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from django.db import connections

from billing.errors import InsufficientFunds
from billing.services import hold_open


class HoldAttempts:
    """The outcomes of ``hold_open`` calls made from several threads with the same ``hold``
    arguments (all but ``request_id``): ``ok``, the request ids of the holds opened; ``refused``,
    the limits that refused them (:class:`~billing.errors.FundsLimit`); ``errors``, anything
    else raised (``repr``), which a test fails on."""

    def __init__(self, **hold: Any) -> None:
        self.hold = hold
        self.ok: list[str] = []
        self.refused: list[str] = []  # FundsLimit values
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def run(self, request_ids: Iterable[str]) -> None:
        """Open one hold per request id in turn, in the calling thread, recording each outcome;
        the thread's database connections are closed at the end."""
        try:
            for request_id in request_ids:
                self._attempt(request_id)
        finally:
            connections.close_all()

    def _attempt(self, request_id: str) -> None:
        try:
            hold_open(request_id=request_id, **self.hold)
        except InsufficientFunds as exc:
            outcomes, outcome = self.refused, exc.limit
        except Exception as exc:  # recorded for the test, which fails on any
            outcomes, outcome = self.errors, repr(exc)
        else:
            outcomes, outcome = self.ok, request_id
        with self._lock:
            outcomes.append(outcome)
