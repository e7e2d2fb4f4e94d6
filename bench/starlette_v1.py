"""infrai's ``/v1`` app on Starlette's routing and request handling, for measurement only.

    .venv/bin/python bench/starlette_v1.py --host 127.0.0.1 --port 8000

The same route table (:data:`inference.routes.ROUTES` and the vector store's), the same
handlers, authentication, settlement and server (``config.server``'s uvicorn with the drain);
only the HTTP layer differs: Starlette's router matches the path, its ``Request`` reads the
body and its responses send the answer, where :class:`inference.http.V1App` does all three
itself. What ours does beyond it (refusing an oversized body before reading it, cancelling the
handler on a disconnect, logging a refused call) is left out here, which can only make this
variant cheaper. ``bench/http_layer.py`` measures both, interleaved, in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def starlette_app() -> Any:
    """The Starlette application serving the ``/v1`` route table."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response as PlainResponse
    from starlette.responses import StreamingResponse as Streamed
    from starlette.routing import Route as StarletteRoute

    from accounts.auth import authenticate
    from config.asgi import inference_app
    from config.errors import internal_error
    from inference.errors import api_error
    from inference.http import (
        FLOOR_KEY,
        ApiRequest,
        Response,
        Route,
        error_response,
        new_request_id,
    )

    def endpoint(route: Route) -> Any:
        async def handle(request: Request) -> PlainResponse:
            api = ApiRequest(
                method=request.method,
                path=request.url.path,
                headers=dict(request.headers),
                body=await request.body(),
                query=parse_qs(request.url.query),
                request_id=new_request_id(),
                started_ns=time.perf_counter_ns(),
                path_params=dict(request.path_params),
                floor=request.scope.get("state", {}).get(FLOOR_KEY) or inference_app.floor_for(),
            )
            try:
                if route.authenticated:
                    api.key = await authenticate(
                        api.headers.get("authorization"), confirm=not route.confirms_key
                    )
                    api.key_confirmed = not route.confirms_key
                answer = await route.methods[request.method](api)
            except Exception as exc:
                answer = error_response(api_error(exc) or internal_error())
            headers = {"x-infrai-request-id": api.request_id, **answer.headers}
            media_type = answer.content_type.decode()
            if isinstance(answer, Response):
                return PlainResponse(answer.body, answer.status, headers, media_type)
            return Streamed(answer.chunks, answer.status, headers, media_type)

        return handle

    return Starlette(
        routes=[
            StarletteRoute(r.path, endpoint(r), methods=list(r.methods))
            for r in inference_app.routes
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from config import asgi, server
    from infra.observability import observe_v1

    built = server.build(args.host, args.port)
    asgi.v1_app = observe_v1(starlette_app())  # config.asgi.http_app reads it per call
    server.settle_the_heap()
    built.run()


if __name__ == "__main__":
    main()
