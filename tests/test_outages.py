"""PostgreSQL or Redis out of reach (infra.outages): told apart, answered with a retryable 503,
logged once a second; and a web process whose Redis stops mid-load and comes back."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import psycopg
import pytest
import redis

from config.errors import ServiceUnavailable
from infra import outages, resp
from tests.live import free_port


def _closed_port() -> int:
    return free_port()  # nothing listens there


def _raised(fn) -> BaseException:  # type: ignore[no-untyped-def]
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_a_failed_connection_is_told_apart_by_service() -> None:
    port = _closed_port()
    pg_async = _raised(
        lambda: asyncio.run(asyncpg.connect(host="127.0.0.1", port=port, user="postgres"))
    )
    pg_sync = _raised(lambda: psycopg.connect(host="127.0.0.1", port=port, connect_timeout=2))
    redis_async = _raised(
        lambda: asyncio.run(resp.Client(f"redis://127.0.0.1:{port}/0").execute(("PING",)))
    )
    redis_sync = _raised(lambda: redis.Redis(port=port).ping())
    assert outages.service_of(pg_async) == "PostgreSQL"  # an OSError, raised inside asyncpg
    assert outages.service_of(pg_sync) == "PostgreSQL"
    assert outages.service_of(redis_async) == "Redis"  # an OSError, raised inside infra.resp
    assert outages.service_of(redis_sync) == "Redis"
    wrapped = _raised(lambda: _reraise_as(RuntimeError("while counting"), redis_sync))
    assert outages.service_of(wrapped) == "Redis"  # through __cause__
    assert outages.service_of(ValueError("a bug")) is None
    assert outages.service_of(OSError("a file")) is None  # not from a database or cache client


def _reraise_as(exc: BaseException, cause: BaseException) -> None:
    raise exc from cause


def test_the_answer_is_a_retryable_503_and_the_log_one_line_a_second(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failure = _raised(lambda: redis.Redis(port=_closed_port()).ping())
    clock = [1000.0]
    monkeypatch.setattr(outages.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(outages, "_throttle", outages._Throttle())
    with caplog.at_level(logging.ERROR, logger="infrai.outages"):
        answers = [outages.unavailable(failure) for _ in range(500)]
        clock[0] += outages.LOG_EVERY_S
        answers.append(outages.unavailable(failure))
    assert all(isinstance(a, ServiceUnavailable) for a in answers)
    first = answers[0]
    assert first is not None and (first.status, first.code) == (503, "service_unavailable")
    assert first.headers()["retry-after"] == "1"
    assert "cache" in first.message and "redis" not in first.message.lower()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "(499 more failures since the last line)" in lines[1]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback per call
