"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus).

For orchestrators: restart a process whose ``/healthz`` fails; send traffic only to one whose
``/readyz`` answers 200 (nginx, a load balancer, Kubernetes' readiness probe, the topology
script). ``/metrics`` answers only a ``Authorization: Bearer <INFRAI_METRICS_TOKEN>`` (404
when the token is not configured, 401 for a wrong one); nginx does not pass it on, so
Prometheus scrapes a web process's own port.

With a read replica configured (``DATABASE_REPLICA_URL``), ``/readyz`` also has a ``replica``
check and its lag under ``details``; the check never makes a process unready (:data:`ADVISORY`):
a replica away or more than ``INFRAI_REPLICA_MAX_LAG_S`` behind only sends the dashboard's
reads to the primary, which the ``database`` check covers.
"""

from __future__ import annotations

import asyncio
import hmac

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse

from config import scrape
from infra import adb, db_router
from infra.db import db_async

# The longest each readiness check may take: a probe must answer, even about a database that
# does not.
PROBE_TIMEOUT_S = 2.0
# Checks shown in /readyz that never make a process unready.
ADVISORY = frozenset({"replica"})


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers (no dependency is touched; also the benchmark's baseline)."""
    return JsonResponse({"status": "ok"})


async def readiness() -> dict[str, str]:
    """Each dependency's state now: ``ok`` or why not. Ready when every value is ``ok``.

    - ``database``: a ``SELECT 1`` on the hot path's pool (:mod:`infra.adb`), within
      :data:`PROBE_TIMEOUT_S` — a pool that lost its connections replaces them for it, so the
      answer is the database's state now, not a dead pooled connection's;
    - ``redis``: a cache round trip;
    - ``models``: at least one model with a routable offering in the catalog as it is now (a
      snapshot built for the probe, in a thread).
    """
    from catalog.selectors import catalog_snapshot_sync, listed_models

    checks: dict[str, str] = {}
    try:
        async with adb.connection() as conn:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), PROBE_TIMEOUT_S)
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    try:
        await asyncio.wait_for(cache.aget("infrai:readyz"), PROBE_TIMEOUT_S)
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"unavailable: {type(exc).__name__}"
    try:
        snapshot = await asyncio.wait_for(db_async(catalog_snapshot_sync)(), PROBE_TIMEOUT_S)
        checks["models"] = "ok" if listed_models(snapshot) else "no routable model"
    except Exception as exc:
        checks["models"] = f"unknown: {type(exc).__name__}"
    return checks


async def replica_details() -> dict[str, object] | None:
    """The replica measured now (``None``: none configured): ``check`` (``ok`` or why reads go
    to the primary), ``lag_s``, ``lag_bytes`` (``None`` when unknown) and ``reads``
    (``replica`` or ``primary``)."""
    if not db_router.configured():
        return None
    max_lag_s = float(settings.INFRAI_REPLICA_MAX_LAG_S)
    try:
        state = await asyncio.wait_for(
            db_async(db_router.replica_state)(max_age_s=0), PROBE_TIMEOUT_S
        )
    except TimeoutError:
        state = db_router.ReplicaState(error="TimeoutError")
    assert state is not None
    return {
        "check": state.describe(max_lag_s),
        "lag_s": state.lag_s,
        "lag_bytes": state.lag_bytes,
        "reads": "replica" if state.usable(max_lag_s) else "primary",
    }


async def readyz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ready", "checks": …}`` or 503 ``{"status": "not_ready", …}``; with a
    replica, ``checks["replica"]`` and ``details["replica"]`` (:func:`replica_details`)."""
    checks = await readiness()
    body: dict[str, object] = {"checks": checks}
    if (replica := await replica_details()) is not None:
        checks["replica"] = str(replica["check"])
        body["details"] = {"replica": replica}
    ready = all(v == "ok" for k, v in checks.items() if k not in ADVISORY)
    return JsonResponse(
        {"status": "ready" if ready else "not_ready", **body},
        status=200 if ready else 503,
    )


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition (see the module docstring for who may read it)."""
    token = str(settings.INFRAI_METRICS_TOKEN)
    if not token:
        return HttpResponse(status=404)
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return HttpResponse(status=401, headers={"www-authenticate": "Bearer"})
    return HttpResponse(scrape.exposition(), content_type="text/plain; version=0.0.4")
