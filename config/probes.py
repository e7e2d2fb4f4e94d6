"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus).

For orchestrators: restart a process whose ``/healthz`` fails; send traffic only to one whose
``/readyz`` answers 200 (nginx, a load balancer, Kubernetes' readiness probe, the topology
script). ``/metrics`` answers only a ``Authorization: Bearer <INFRAI_METRICS_TOKEN>`` (404
when the token is not configured, 401 for a wrong one); nginx does not pass it on, so
Prometheus scrapes a web process's own port.
"""

from __future__ import annotations

import asyncio
import hmac

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse

from config import scrape
from infra import adb
from infra.db import db_async

# The longest each readiness check may take: a probe must answer, even about a database that
# does not.
PROBE_TIMEOUT_S = 2.0


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


async def readyz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ready", "checks": …}`` or 503 ``{"status": "not_ready", …}``."""
    checks = await readiness()
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "not_ready", "checks": checks},
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
