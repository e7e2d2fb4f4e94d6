"""The per-vendor circuit breaker (shared through the cache) and its effect on routing."""

from __future__ import annotations

import asyncio

import pytest

from catalog import health
from catalog.routing import RoutingRequest
from catalog.selectors import routing_decide
from catalog.types import CircuitState


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1_000_000.0]
    monkeypatch.setattr(health.time, "time", lambda: now[0])
    return now


@pytest.fixture(autouse=True)
def _circuit_settings(settings) -> None:
    settings.INFRAI_CIRCUIT_FAILURE_THRESHOLD = 3
    settings.INFRAI_CIRCUIT_COOLDOWN_S = 30


def test_consecutive_failures_open_the_circuit(clock):
    assert health.record_failure("v") is CircuitState.CLOSED
    assert health.record_failure("v") is CircuitState.CLOSED
    assert health.record_failure("v") is CircuitState.OPEN
    assert health.state("v") is CircuitState.OPEN
    assert health.allow_request("v") is False


def test_a_success_resets_the_failure_count(clock):
    health.record_failure("v")
    health.record_failure("v")
    health.record_success("v", 120)
    assert health.record_failure("v") is CircuitState.CLOSED
    assert health.health_of(["v"])["v"].consecutive_failures == 1


def test_after_the_cool_down_exactly_one_trial_request_goes_through(clock):
    for _ in range(3):
        health.record_failure("v")
    clock[0] += 31
    assert health.state("v") is CircuitState.HALF_OPEN
    assert health.allow_request("v") is True
    assert health.allow_request("v") is False  # the trial is taken
    health.record_success("v", 50)
    assert health.state("v") is CircuitState.CLOSED
    assert health.allow_request("v") is True


def test_a_failed_trial_opens_the_circuit_again(clock):
    for _ in range(3):
        health.record_failure("v")
    clock[0] += 31
    assert health.allow_request("v") is True
    assert health.record_failure("v") is CircuitState.OPEN
    assert health.allow_request("v") is False
    clock[0] += 31
    assert health.allow_request("v") is True


def test_latency_is_a_moving_average(clock):
    health.record_success("v", 100)
    health.record_success("v", 500)
    assert health.health_of(["v"])["v"].latency_ms == 200


def test_async_variants_share_the_same_state(clock):
    async def scenario() -> tuple[CircuitState, bool, CircuitState]:
        for _ in range(3):
            await health.arecord_failure("w")
        opened = await health.astate("w")
        clock[0] += 31
        trial = await health.allow_request_async("w")
        await health.arecord_success("w", 10)
        return opened, trial, await health.astate("w")

    opened, trial, closed = asyncio.run(scenario())
    assert (opened, trial, closed) == (CircuitState.OPEN, True, CircuitState.CLOSED)
    assert health.state("w") is CircuitState.CLOSED
    assert asyncio.run(health.ahealth_of(["w"]))["w"].latency_ms == 10


@pytest.mark.django_db(transaction=True)
def test_routing_leaves_out_a_vendor_whose_circuit_is_open(make_routable, clock):
    make_routable("openai", "deepseek")
    request = RoutingRequest(model="auto")
    assert asyncio.run(routing_decide(request=request)).first.vendor == "deepseek"
    for _ in range(3):
        health.record_failure("deepseek")
    decision = asyncio.run(routing_decide(request=request))
    assert {c.vendor for c in decision.candidates} == {"openai"}
