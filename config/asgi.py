"""ASGI entry point: `/v1` to the lean API consumer, websockets to Channels, the rest to Django."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
django_asgi_app = get_asgi_application()

import atexit  # noqa: E402

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from batches import api as batches_api  # noqa: E402  (/v1/batches)
from dashboard.routing import websocket_urlpatterns  # noqa: E402
from inference import routes, settlement  # noqa: E402
from inference.floor import PerLoop  # noqa: E402
from inference.http import V1App  # noqa: E402
from infra.observability import observe_v1  # noqa: E402
from vectors import api as vectors_api  # noqa: E402  (/v1/vector/*, /v1/files, /v1/vector_stores)

inference_app = V1App(
    (*routes.ROUTES, *vectors_api.ROUTES, *batches_api.ROUTES),
    on_unlogged_failure=settlement.log_unheld_failure,
    # Under a server that hands the app no floor (daphne, which drops open streams on SIGTERM
    # without their cleanup): one per loop, whose streams are billed at exit.
    floor_for=PerLoop(on_new=lambda floor: atexit.register(settlement.settle_now, floor)),
)
v1_app = observe_v1(inference_app)  # request counts, latency, the call's root span


async def http_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Send ``/v1`` and ``/v1/...`` (but ``/v1/organization/...``) to :func:`inference.http.v1_app`;
    everything else to Django."""
    path: str = scope["path"]
    # The management API (DRF, admin keys) goes through Django's stack; inference stays lean.
    if (path == "/v1" or path.startswith("/v1/")) and not path.startswith("/v1/organization/"):
        await v1_app(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
