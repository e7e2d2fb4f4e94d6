"""The calls a server carries are one object the server owns (:mod:`inference.floor`), reached
through each request's scope — not process-wide state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from config.errors import ServiceUnavailable
from inference.floor import Floor, PerLoop
from inference.http import FLOOR_KEY, ApiRequest, V1App, json_response, route


def _app(seen: list[Any], made: list[Floor[Any]]) -> V1App:
    async def handler(request: ApiRequest) -> Any:
        seen.append(request.floor)
        return json_response({"ok": True})

    return V1App(
        [route("/v1/probe", methods={"GET": handler}, authenticated=False)],
        on_unlogged_failure=lambda request, exc: None,
        floor_for=PerLoop(on_new=made.append),
    )


async def _get(app: V1App, state: dict[str, Any] | None) -> int:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client stays: no disconnect
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/v1/probe", "headers": []}
    if state is not None:
        scope["state"] = state
    await app(scope, receive, send)
    return int(sent[0]["status"])


def test_a_request_carries_the_floor_its_server_put_in_the_scope() -> None:
    seen: list[Any] = []
    made: list[Floor[Any]] = []
    app = _app(seen, made)
    server_floor: Floor[Any] = Floor()

    async def scenario() -> None:
        assert await _get(app, {FLOOR_KEY: server_floor}) == 200
        assert await _get(app, {}) == 200  # a server that passes none: the loop's own
        assert await _get(app, None) == 200

    asyncio.run(scenario())
    assert seen[0] is server_floor
    assert len(made) == 1 and seen[1] is seen[2] is made[0] is not server_floor


def test_each_event_loop_under_a_server_without_a_floor_gets_its_own() -> None:
    seen: list[Any] = []
    made: list[Floor[Any]] = []
    app = _app(seen, made)
    asyncio.run(_get(app, None))
    asyncio.run(_get(app, None))
    assert len(made) == 2 and seen[0] is not seen[1]


def test_a_draining_floor_refuses_new_holds_and_another_servers_does_not() -> None:
    draining, serving = Floor[Any](), Floor[Any]()
    draining.draining = True
    with pytest.raises(ServiceUnavailable) as refused:
        draining.refuse_if_draining()
    assert refused.value.code == "server_shutting_down" and refused.value.status == 503
    serving.refuse_if_draining()  # no exception: its server is not stopping
