"""Request ids that carry their creation time: ``req_`` + 12 hex digits of milliseconds since
the Unix epoch + 12 random hex digits (the same shape as before: ``req_`` + 24 hex).

The request log is partitioned by ``created_at`` and PostgreSQL's unique constraint on a
partitioned table must include the partition key, so its exactly-once key is
``(request_id, created_at)``. Every writer of a call's row (the settlement, the sweeper's
``abandoned`` row, a journal replay) must therefore put the same ``created_at`` on it; each
derives it from the id alone with :func:`created_at`, so no writer needs another's clock.
Ids made before this format (fully random) decode to a time outside the plausible window
almost always (then ``None``: the writer uses its own clock, as it did before).
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime, timedelta

PREFIX = "req_"
_TIME_DIGITS = 12
_RANDOM_BYTES = 6
# Ids whose time field decodes outside [this, now + a day] are not time-carrying ids.
_EARLIEST_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
_FUTURE_SLACK_MS = 86_400_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def new(prefix: str = PREFIX, *, now_ms: int | None = None) -> str:
    """A new id: ``prefix`` + the time (``now_ms``, default the wall clock) + randomness.
    48 random bits per millisecond: a collision needs ~16 M ids in one millisecond."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return f"{prefix}{ms:0{_TIME_DIGITS}x}{secrets.token_hex(_RANDOM_BYTES)}"


def created_at(request_id: str) -> datetime | None:
    """The creation time carried by ``request_id`` (millisecond precision, UTC), or None for
    an id that carries none (another format, or a time not plausible for a call)."""
    _prefix, sep, rest = request_id.rpartition("_")
    if not sep or len(rest) != _TIME_DIGITS + 2 * _RANDOM_BYTES:
        return None
    try:
        ms = int(rest[:_TIME_DIGITS], 16)
        int(rest[_TIME_DIGITS:], 16)
    except ValueError:
        return None
    if not _EARLIEST_MS <= ms <= time.time_ns() // 1_000_000 + _FUTURE_SLACK_MS:
        return None
    return _EPOCH + timedelta(milliseconds=ms)
