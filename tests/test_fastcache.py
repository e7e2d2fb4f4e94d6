"""The hot path's Redis client (``infra.resp`` under ``infra.fastcache``) against the real
Redis, and against servers on 127.0.0.1 that misbehave: bursts, lost connections, silence,
error replies, cancelled callers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import uvloop
from django.conf import settings

from infra import fastcache, resp

T = TypeVar("T")


@pytest.fixture(params=["asyncio", "uvloop"])
def on_loop(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Runs a coroutine on the standard event loop, and on uvloop (the web process's)."""
    return asyncio.run if request.param == "asyncio" else uvloop.run  # type: ignore[return-value]


def test_a_burst_of_concurrent_calls_shares_one_connection_and_each_gets_its_own_reply(on_loop):
    async def burst() -> list[object]:
        for n in range(50):
            await fastcache.set(f"burst:{n}", {"n": n}, 30)
        return await asyncio.gather(*(fastcache.get(f"burst:{n % 50}") for n in range(1000)))

    assert on_loop(burst()) == [{"n": n % 50} for n in range(1000)]


def test_many_first_callers_on_a_new_loop_share_one_connection_attempt(on_loop):
    """The first calls of a loop arrive together (a process's first burst): one connects, the
    others wait for that connection, and every one is answered."""
    client = resp.Client(str(settings.REDIS_URL))

    async def first_burst() -> list[list[object]]:
        return await asyncio.gather(*(client.execute(("PING",)) for _ in range(200)))

    assert on_loop(first_burst()) == [["PONG"]] * 200


def test_counters_and_a_read_in_one_round_trip(on_loop):
    async def run() -> tuple[str | None, list[int]]:
        await fastcache.set("seen", {"a": 1}, 30)
        await fastcache.get_raw_and_incr_many("seen", [("c1", 2), ("c2", 5)], 30)
        return await fastcache.get_raw_and_incr_many("seen", [("c1", 2), ("c2", -1)], 30)

    assert on_loop(run()) == (fastcache.encode({"a": 1}), [4, 4])


def test_an_error_reply_raises_and_the_connection_keeps_serving(on_loop):
    client = resp.Client(str(settings.REDIS_URL))

    async def run() -> list[object]:
        await client.execute(("SET", "resp:text", "x"))
        with pytest.raises(resp.ReplyError, match="not an integer"):
            await client.execute(("INCRBY", "resp:text", 1))
        return await client.execute(("GET", "resp:text"), ("DEL", "resp:text"))

    assert on_loop(run()) == ["x", 1]


def test_a_cancelled_caller_never_takes_another_callers_reply(on_loop):
    client = resp.Client(str(settings.REDIS_URL))

    async def run() -> list[object]:
        await client.execute(("SET", "resp:a", "A"), ("SET", "resp:b", "B"))
        slow = asyncio.ensure_future(client.execute(("GET", "resp:a")))
        await asyncio.sleep(0)  # sent
        slow.cancel()
        return await client.execute(("GET", "resp:b"))

    assert on_loop(run()) == ["B"]


@pytest.fixture
def silent_server() -> Iterator[int]:
    """The port of a TCP server on 127.0.0.1 that never answers (the kernel completes the
    connections; nobody reads them)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    yield listener.getsockname()[1]
    listener.close()


def test_a_silent_server_fails_the_call_after_the_timeout_and_a_new_connection_is_made(
    silent_server, on_loop
):
    client = resp.Client(f"redis://127.0.0.1:{silent_server}/0", timeout_s=0.3)

    async def run() -> None:
        with pytest.raises(ConnectionError):
            await client.execute(("GET", "x"))
        with pytest.raises(ConnectionError):  # reconnects, and times out again
            await client.execute(("GET", "x"))

    on_loop(run())


def test_a_lost_connection_fails_the_waiting_calls_and_the_next_call_reconnects(on_loop):
    real = resp.Address.parse(str(settings.REDIS_URL))
    client = resp.Client(str(settings.REDIS_URL))

    async def run() -> list[object]:
        await client.execute(("SET", "resp:k", "v"))
        # Redis itself closes this client's connection, with a call waiting on it.
        (client_id,) = await client.execute(("CLIENT", "ID"))
        killer = resp.Client(f"redis://{real.host}:{real.port}/{real.db}")
        waiting = asyncio.ensure_future(client.execute(("BLPOP", "resp:never", 5)))
        await asyncio.sleep(0.05)
        await killer.execute(("CLIENT", "KILL", "ID", client_id))
        with pytest.raises(ConnectionError):
            await waiting
        return await client.execute(("GET", "resp:k"))

    assert on_loop(run()) == ["v"]


def test_urls_are_read_with_their_database_credentials_and_transport():
    assert resp.Address.parse("redis://u:p%40ss@cache:6380/3") == resp.Address(
        host="cache", port=6380, username="u", password="p@ss", db=3
    )
    assert resp.Address.parse("rediss://cache").tls
    unix = resp.Address.parse("unix:///run/redis.sock?db=2")
    assert (unix.path, unix.db) == ("/run/redis.sock", 2)
    with pytest.raises(ValueError):
        resp.Address.parse("http://cache")
