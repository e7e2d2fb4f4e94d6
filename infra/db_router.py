"""Reads of the dashboard and the management API from a PostgreSQL streaming replica.

With ``DATABASE_REPLICA_URL`` set, Django has a second database alias, :data:`REPLICA`, and
this module decides, per query, which one Django's ORM uses (docs/deploy.md "Reads from a
replica"):

- **Writes always go to the primary** (:data:`PRIMARY`, Django's ``default``):
  :meth:`ReplicaRouter.db_for_write` answers ``default`` for every model, even for an object
  read from the replica. The replica is read-only (PostgreSQL refuses any write there), so a
  write routed to it would fail loudly, never land in the wrong place.
- **Reads go to the replica only inside a replica route**: a GET or HEAD of a view of an app
  in ``INFRAI_REPLICA_READ_APPS`` (the dashboard, the management API and their CSV exports),
  marked by :class:`ReplicaReadsMiddleware`, or a block of :func:`reads_from_replica`. Nothing
  else ever is: ``/v1`` (its own ASGI app, money on asyncpg, :mod:`infra.adb`), Celery tasks,
  the Stripe webhooks, the admin and every POST read the primary.
- **Even inside a route** a read goes to the primary when it runs inside a transaction on the
  primary (a service's ``atomic`` block reads what it is about to write), or reads who the
  caller is and what they may do (:func:`primary_only`): the session, the user, the second
  factor — a login's writes must be seen by the very next request, whose session key has
  changed — and the memberships and admin keys every page and management call is authorized
  by, so that a removed member, a lowered role or a revoked admin key is refused on the very
  next request, not once the replica has replayed it.
- **Read your writes**: a request that wrote (any POST/PUT/PATCH/DELETE, or a GET that wrote
  through the ORM) stamps its client — the ``Authorization`` header of an API client, else the
  session cookie — in Redis for ``INFRAI_READ_YOUR_WRITES_S``; that client's reads go to the
  primary until the stamp expires, so the page after a top-up or a new key shows it at once.
  A GET whose only writes are to :func:`primary_only` models (an admin key's ``last_used_at``,
  a session) stamps nothing: those rows are read from the primary anyway.
- **Health**: :func:`replica_state` measures the replica's lag (one query on each server) at
  most every ``INFRAI_REPLICA_CHECK_S`` per process, in a thread of its own (no request waits
  for it but the first one of a process). A replica that does not answer, is not a
  standby, or is more than ``INFRAI_REPLICA_MAX_LAG_S`` behind is not used: reads go to the
  primary until a later check finds it well. A GET that failed (5xx) while reading from the
  replica makes the middleware check at once and, if the replica is down, answer the GET again
  from the primary.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import MiddlewareNotUsed
from django.db import connections
from django.db.models import Model
from django.http import HttpRequest, HttpResponseBase

log = logging.getLogger(__name__)

PRIMARY = "default"
REPLICA = "replica"
# Identity and sign-in state: read from the primary even inside a replica route (a login writes
# them and rotates the session key, so no read-your-writes stamp could cover the next request).
PRIMARY_ONLY_APPS = frozenset(
    {"sessions", "auth", "contenttypes", "admin", "axes", "otp_totp", "otp_static", "django_otp"}
)
# What every dashboard page and management call is authorized by (besides the user model):
# a revocation or a role change holds on the very next request.
PRIMARY_ONLY_MODELS = frozenset({"accounts.Membership", "management.AdminKey"})
SAFE_METHODS = frozenset({"GET", "HEAD"})
_STAMP_PREFIX = "replica:wrote:"


@dataclass
class ReadRoute:
    """Where the reads of one request (or :func:`reads_from_replica` block) go.

    ``replica``: its reads may go to the replica (decided once, before the view runs);
    ``wrote``: it wrote through the ORM (set by the router; the middleware then stamps the
    client for read-your-writes).
    """

    replica: bool = False
    wrote: bool = False


_route: ContextVar[ReadRoute | None] = ContextVar("infrai_read_route", default=None)


def configured() -> bool:
    """Whether a replica is configured (``DATABASE_REPLICA_URL``)."""
    return REPLICA in settings.DATABASES


@contextlib.contextmanager
def _routed(route: ReadRoute) -> Iterator[ReadRoute]:
    token = _route.set(route)
    try:
        yield route
    finally:
        _route.reset(token)


@contextlib.contextmanager
def reads_from_replica() -> Iterator[ReadRoute]:
    """Send the block's ORM reads to the replica, as a dashboard GET does (the primary when no
    replica is configured). No health check: the caller has made it (the middleware does) or
    wants the replica regardless (tests). Writes, and reads inside a transaction on the primary,
    still go to the primary."""
    with _routed(ReadRoute(replica=configured())) as route:
        yield route


def primary_only(model: type[Model]) -> bool:
    """Whether ``model`` is read from the primary even inside a replica route: who the caller
    is and what they may do (:data:`PRIMARY_ONLY_APPS`, :data:`PRIMARY_ONLY_MODELS`, the user
    model)."""
    meta = model._meta
    return (
        meta.app_label in PRIMARY_ONLY_APPS
        or meta.label in PRIMARY_ONLY_MODELS
        or meta.label == settings.AUTH_USER_MODEL
    )


V = TypeVar("V", bound=Callable[..., Any])


def primary_reads(view: V) -> V:
    """Mark a GET view of a replica app that writes from what it reads (following an e-mail
    link that verifies an address and grants starter credit): its reads go to the primary, as
    a POST's do. Apply it outermost or inside decorators that copy the view's attributes
    (``functools.wraps`` does)."""
    view.infrai_primary_reads = True  # type: ignore[attr-defined]
    return view


class ReplicaRouter:
    """Django's database router (``DATABASE_ROUTERS``): see the module docstring."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str:
        route = _route.get()
        if (
            route is None
            or not route.replica
            or route.wrote  # what this request wrote, it reads back
            or primary_only(model)
            or connections[PRIMARY].in_atomic_block
        ):
            return PRIMARY
        return REPLICA

    def db_for_write(self, model: type[Model], **hints: Any) -> str:
        route = _route.get()
        if route is not None and not primary_only(model):
            route.wrote = True
        return PRIMARY

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool:
        """Both aliases hold the same rows."""
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        """Migrations run on the primary only (the replica replays them)."""
        return db == PRIMARY


# --- the replica's health -----------------------------------------------------------------------


@dataclass(frozen=True)
class ReplicaState:
    """The replica as last measured.

    ``lag_bytes``: WAL the primary had flushed (what it sends) that the replica had not
    replayed;
    ``lag_s``: 0 when caught up, else the age of the last transaction it replayed (an upper
    bound: after an idle spell the first write reads as old as the spell until replayed);
    ``None`` when unknown. ``error``: why it is not used ("" when it answered as a standby).
    """

    lag_s: float | None = None
    lag_bytes: int | None = None
    error: str = ""

    @property
    def available(self) -> bool:
        return not self.error

    def usable(self, max_lag_s: float) -> bool:
        """Whether reads may go to it: it answers as a standby no more than ``max_lag_s``
        behind."""
        return self.available and self.lag_s is not None and self.lag_s <= max_lag_s

    def describe(self, max_lag_s: float) -> str:
        """``ok``, or why reads go to the primary (the ``replica`` check of ``/readyz``)."""
        if not self.available:
            return f"unavailable: {self.error} (reads on the primary)"
        if self.lag_s is None:
            return "lag unknown: nothing replayed yet (reads on the primary)"
        if self.lag_s > max_lag_s:
            return f"lagging: {self.lag_s:.1f} s behind (reads on the primary)"
        return "ok"


# One query on the replica, given the primary's current WAL position.
_LAG_SQL = (
    "SELECT pg_is_in_recovery(), pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn()),"
    " EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp())"
)


def measure() -> ReplicaState:
    """The replica's state now: the primary's WAL position, then how far the replica has
    replayed (two round trips, on this thread's connections of each alias)."""
    try:
        with connections[PRIMARY].cursor() as cur:
            # Flushed: a standby is sent no more (and every commit is flushed).
            cur.execute("SELECT pg_current_wal_flush_lsn()::text")
            (primary_lsn,) = cur.fetchone()
        with connections[REPLICA].cursor() as cur:
            cur.execute(_LAG_SQL, [primary_lsn])
            in_recovery, behind, age_s = cur.fetchone()
    except Exception as exc:  # a server away, a pool timeout: the state, not an error
        with contextlib.suppress(Exception):
            connections[REPLICA].close()
        return ReplicaState(error=type(exc).__name__)
    if not in_recovery:
        return ReplicaState(error="not a standby")
    lag_bytes = max(int(behind), 0)
    if lag_bytes == 0:
        return ReplicaState(lag_s=0.0, lag_bytes=0)
    lag_s = None if age_s is None else max(float(age_s), 0.0)
    return ReplicaState(lag_s=lag_s, lag_bytes=lag_bytes)


class _Memo:
    lock = threading.Lock()  # held while measuring
    state: ReplicaState | None = None
    at = 0.0  # when the measurement of ``state`` began (monotonic)


def replica_state(*, max_age_s: float | None = None) -> ReplicaState | None:
    """The replica's state as this process last measured it, measured again once that is older
    than ``max_age_s`` (default ``INFRAI_REPLICA_CHECK_S``). ``None``: no replica configured.

    Who measures: the caller when there is no measurement yet, or when it asks for one begun
    now (``max_age_s=0``: the probes, the fallback of a failed read; it waits for one under
    way, then measures again unless that one began after it asked); otherwise a thread of its
    own while the caller goes on with the last state, so that no request waits on a replica
    that does not answer (up to its pool's timeout, 2 s) once per check while it is away.
    """
    if not configured():
        return None
    asked = time.monotonic()
    max_age = settings.INFRAI_REPLICA_CHECK_S if max_age_s is None else max_age_s
    state = _Memo.state
    if state is not None and asked - _Memo.at < max_age:
        return state
    if state is not None and max_age > 0:
        _measure_in_background()
        return state
    with _Memo.lock:
        latest = _Memo.state
        if latest is not None and (state is None or _Memo.at >= asked):
            return latest  # measured while this caller waited
        return _measured()


def _measured() -> ReplicaState:
    """Measure now and remember it (the caller holds :attr:`_Memo.lock`)."""
    began = time.monotonic()
    fresh = measure()
    _Memo.state, _Memo.at = fresh, began
    return fresh


def _measure_in_background() -> None:
    """Measure in a thread of its own, unless a measurement is under way."""
    if not _Memo.lock.acquire(blocking=False):
        return

    def run() -> None:
        try:
            _measured()
        finally:
            connections.close_all()  # this thread's, back to their pools
            _Memo.lock.release()

    try:
        threading.Thread(target=run, name="infrai-replica-check", daemon=True).start()
    except BaseException:
        _Memo.lock.release()
        raise


def replica_usable(*, max_age_s: float | None = None) -> bool:
    """Whether reads may go to the replica now (configured, answering, not too far behind)."""
    state = replica_state(max_age_s=max_age_s)
    return state is not None and state.usable(settings.INFRAI_REPLICA_MAX_LAG_S)


# --- read your writes ---------------------------------------------------------------------------


def _client(request: HttpRequest) -> str | None:
    """Who sent the request: an API client's ``Authorization`` header, else the browser's
    session cookie; ``None`` for neither (an anonymous visitor reads the primary's defaults)."""
    return request.headers.get("authorization") or request.COOKIES.get(settings.SESSION_COOKIE_NAME)


def _stamp_key(client: str) -> str:
    return _STAMP_PREFIX + hashlib.sha256(client.encode()).hexdigest()[:32]


def stamp_writes(request: HttpRequest) -> None:
    """Send this request's client's reads to the primary for ``INFRAI_READ_YOUR_WRITES_S``.
    A Redis that does not answer costs nothing here (the next read then checks and fails
    safe)."""
    client = _client(request)
    if client is None:
        return
    try:
        cache.set(_stamp_key(client), 1, timeout=math.ceil(settings.INFRAI_READ_YOUR_WRITES_S))
    except Exception:
        log.warning("replica: could not stamp a client's write", exc_info=True)


def wrote_recently(request: HttpRequest) -> bool:
    """Whether this request's client wrote within ``INFRAI_READ_YOUR_WRITES_S`` (True when
    Redis cannot say: then the primary, which is always right)."""
    client = _client(request)
    if client is None:
        return False
    try:
        return cache.get(_stamp_key(client)) is not None
    except Exception:
        return True


# --- the middleware -----------------------------------------------------------------------------


def _on_route(route: ReadRoute, chunks: Iterable[Any]) -> Iterator[Any]:
    """A streamed body (a CSV export) read in ``route``: the server iterates it after the
    middleware has returned, each chunk under the route again."""
    iterator = iter(chunks)
    while True:
        with _routed(route):
            chunk = next(iterator, _END)
        if chunk is _END:
            return
        yield chunk


_END = object()


class ReplicaReadsMiddleware:
    """Marks the reads of GET/HEAD requests to the views of ``INFRAI_REPLICA_READ_APPS`` for
    the replica while it is usable and the client has not written lately; stamps a client that
    wrote; answers a failed replica read again from the primary (module docstring). Not used at
    all (no cost) without a replica. Sync and async alike."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        if not configured():
            raise MiddlewareNotUsed
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        route = ReadRoute()
        request.infrai_read_route = route  # type: ignore[attr-defined]
        with _routed(route):
            response = self.get_response(request)
            if _failed_on_replica(route, response) and _fall_back(route):
                response = self.get_response(request)
        if route.wrote or request.method not in SAFE_METHODS:
            stamp_writes(request)
        return _streamed_on(route, response)

    async def __acall__(self, request: HttpRequest) -> Any:
        route = ReadRoute()
        request.infrai_read_route = route  # type: ignore[attr-defined]
        with _routed(route):
            response = await self.get_response(request)
            if _failed_on_replica(route, response) and await sync_to_async(_fall_back)(route):
                response = await self.get_response(request)
        if route.wrote or request.method not in SAFE_METHODS:
            await sync_to_async(stamp_writes)(request)
        return _streamed_on(route, response)

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        """Decide the request's route before its view runs (in the view's thread)."""
        route: ReadRoute | None = getattr(request, "infrai_read_route", None)
        if route is None or request.method not in SAFE_METHODS:
            return
        app = getattr(view, "__module__", "").partition(".")[0]
        if app not in settings.INFRAI_REPLICA_READ_APPS or getattr(
            view, "infrai_primary_reads", False
        ):
            return
        route.replica = not wrote_recently(request) and replica_usable()


def _failed_on_replica(route: ReadRoute, response: HttpResponseBase) -> bool:
    return route.replica and response.status_code >= 500


def _fall_back(route: ReadRoute) -> bool:
    """After a 5xx of a request that read from the replica: check the replica now; when it is
    not usable, route the request to the primary and say so (the caller answers it again)."""
    if replica_usable(max_age_s=0):
        return False
    log.warning("replica: not usable (%s); answering from the primary", _Memo.state)
    route.replica = False
    return True


def _streamed_on(route: ReadRoute, response: Any) -> Any:
    if route.replica and response.streaming and not getattr(response, "is_async", False):
        response.streaming_content = _on_route(route, response.streaming_content)
    return response
