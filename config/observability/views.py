"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus).

For orchestrators: restart a process whose ``/healthz`` fails; send traffic only to one whose
``/readyz`` answers 200 (nginx, a load balancer, Kubernetes' readiness probe, the topology
script). ``/metrics`` answers only a ``Authorization: Bearer <INFRAI_METRICS_TOKEN>`` (404
when the token is not configured, 401 for a wrong one); nginx does not pass it on, so
Prometheus scrapes a web process's own port.
"""

from __future__ import annotations

import hmac

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from config.observability import scrape


async def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers (no dependency is touched; also the benchmark's baseline)."""
    return JsonResponse({"status": "ok"})


def readiness() -> dict[str, str]:
    """Each dependency's state: ``ok`` or why not. Ready when every value is ``ok``.

    - ``database``: a ``SELECT 1``;
    - ``redis``: a cache round trip (``ok`` without Redis, where the cache is in-process);
    - ``models``: at least one model with a routable offering in the catalog snapshot.
    """
    from catalog.selectors import catalog_snapshot_sync, listed_models

    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    try:
        cache.get("infrai:readyz")
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"unavailable: {type(exc).__name__}"
    try:
        count = len(listed_models(catalog_snapshot_sync()))
        checks["models"] = "ok" if count else "no routable model"
    except Exception as exc:
        checks["models"] = f"unknown: {type(exc).__name__}"
    return checks


async def readyz(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ready", "checks": …}`` or 503 ``{"status": "not_ready", …}``."""
    checks = await sync_to_async(readiness, thread_sensitive=False)()
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
