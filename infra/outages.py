"""PostgreSQL or Redis out of reach: a retryable 503, and one log line a second, not one per call.

The request path's boundary (:mod:`inference.http`) asks :func:`unavailable` about any
exception it did not expect. An exception that says a connection to PostgreSQL or Redis failed
(refused, reset, closed, timed out, the server shutting down) becomes
:class:`~config.errors.ServiceUnavailable` with ``retry-after: 1``: the OpenAI SDKs retry it,
and nothing was served for it (the pipeline holds money before a vendor call, and fails closed
when it cannot). Which service failed is read from where the exception was raised (the
traceback's modules), so an ``OSError`` from asyncpg's connect and one from the Redis client
are told apart.

Logging: the first failure of a service in a second is logged with its exception (no
traceback); the others of that second are counted and the count logged with the next line.
A Redis outage at ~900 calls a second was ~900 tracebacks a second before.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from config.errors import ServiceUnavailable

# The error code of an outage's 503 (a draining process's 503 has its own).
OUTAGE_CODE = "service_unavailable"

log = logging.getLogger("infrai.outages")

# The modules whose frames name the service (the first match, innermost frame first, wins).
_SERVICES = (
    ("asyncpg", "PostgreSQL"),
    ("psycopg", "PostgreSQL"),
    ("django.db", "PostgreSQL"),
    ("infra.adb", "PostgreSQL"),
    ("infra.resp", "Redis"),
    ("redis", "Redis"),
    ("kombu", "Redis"),
    ("channels_redis", "Redis"),
    ("infra.fastcache", "Redis"),
)
LOG_EVERY_S = 1.0


def _is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost or refused connection rather than a query's own error."""
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    module = type(exc).__module__
    if module.startswith("asyncpg"):
        # Connection-class errors (SQLSTATE 08…), the server shutting down (57P…), a
        # connection asyncpg already knows is closed, and one whose protocol state a dying
        # backend left broken ("another operation is in progress", seen when backends are
        # terminated mid-statement).
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith(("08", "57P")) or bool(
            names & {"InterfaceError", "InternalClientError"}
        )
    if module.startswith(("psycopg", "django.db")):
        return bool(names & {"OperationalError", "InterfaceError"})
    if module.startswith("redis"):
        return bool(names & {"ConnectionError", "TimeoutError", "BusyLoadingError"})
    return False


def _innermost_service(tb: TracebackType | None) -> str | None:
    found = None
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        for prefix, service in _SERVICES:
            if module == prefix or module.startswith(prefix + "."):
                found = service
                break
        tb = tb.tb_next
    return found


def service_of(exc: BaseException) -> str | None:
    """``"PostgreSQL"`` or ``"Redis"`` when ``exc`` (or what caused it) is a failed connection
    to it, else ``None``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_connection_failure(current):
            module = type(current).__module__
            if module.startswith(("asyncpg", "psycopg", "django.db")):
                return "PostgreSQL"
            if module.startswith("redis"):
                return "Redis"
            service = _innermost_service(current.__traceback__)
            if service is not None:
                return service
        current = current.__cause__ or current.__context__
    return None


class _Throttle:
    """One log line per service per :data:`LOG_EVERY_S`, counting the calls in between."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def note(self, service: str, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(service, -LOG_EVERY_S) < LOG_EVERY_S:
                self._quiet[service] = self._quiet.get(service, 0) + 1
                return
            self._last[service] = now
            quiet = self._quiet.pop(service, 0)
        log.error(
            "%s unavailable: %s: %s (%d more failures since the last line)",
            service,
            type(exc).__name__,
            str(exc)[:200],
            quiet,
        )


_throttle = _Throttle()


def noted(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL or Redis out of reach; if so it is logged here (one line a
    second). For best-effort work that logs its other failures itself::

        except Exception as exc:
            if not outages.noted(exc):
                log.warning("live push failed", exc_info=True)
    """
    service = service_of(exc)
    if service is not None:
        _throttle.note(service, exc)
    return service is not None


def unavailable(exc: BaseException) -> ServiceUnavailable | None:
    """The 503 to answer for ``exc`` when it is PostgreSQL or Redis out of reach (logged,
    throttled), else ``None`` (a bug: the caller logs it as one)."""
    service = service_of(exc)
    if service is None:
        return None
    _throttle.note(service, exc)
    return ServiceUnavailable(
        f"infrai could not reach its {'database' if service == 'PostgreSQL' else 'cache'} to "
        "serve this request. Retry the request.",
        code=OUTAGE_CODE,
        headers={"retry-after": "1"},
    )
