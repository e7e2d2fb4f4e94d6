"""A circuit breaker per vendor, shared by every process through the Django cache (Redis).

States: *closed* (calls flow), *open* (``INFRAI_CIRCUIT_FAILURE_THRESHOLD`` consecutive failures
— default 5 — stop calls for ``INFRAI_CIRCUIT_COOLDOWN_S`` seconds, default 30), *half-open*
(the cool-down passed: exactly one caller wins :func:`allow_request` and tries; its success
closes the circuit, its failure opens it for another cool-down).

Feeds: live traffic (the chat path calls :func:`arecord_success` / :func:`arecord_failure`
after each vendor call) and the beat probe (:mod:`catalog.tasks`). Latency is an exponential
moving average (weight 1/4 for the newest sample) in whole milliseconds.

Cache keys (prefix ``circuit:<vendor>:``): ``fails`` (consecutive failures), ``open_until``
(unix seconds), ``trial`` (the half-open token), ``latency_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.conf import settings
from django.core.cache import cache

from catalog.types import CircuitState, VendorHealth

_TTL_S = 7 * 24 * 3600


def _threshold() -> int:
    return int(getattr(settings, "INFRAI_CIRCUIT_FAILURE_THRESHOLD", 5))


def _cooldown_s() -> int:
    return int(getattr(settings, "INFRAI_CIRCUIT_COOLDOWN_S", 30))


def _key(vendor: str, part: str) -> str:
    return f"circuit:{vendor}:{part}"


def _state_of(open_until: float | None, *, now: float) -> CircuitState:
    if open_until is None:
        return CircuitState.CLOSED
    return CircuitState.OPEN if now < open_until else CircuitState.HALF_OPEN


def state(vendor: str) -> CircuitState:
    """The circuit state of ``vendor`` now."""
    return _state_of(cache.get(_key(vendor, "open_until")), now=time.time())


def health_of(vendors: Iterable[str]) -> dict[str, VendorHealth]:
    """State, latency and failure count of each vendor, in one cache round trip."""
    names = list(vendors)
    keys = [_key(v, p) for v in names for p in ("open_until", "latency_ms", "fails")]
    values = cache.get_many(keys)
    return _assemble(names, values, now=time.time())


async def ahealth_of(vendors: Iterable[str]) -> dict[str, VendorHealth]:
    """Async :func:`health_of` for the hot path."""
    names = list(vendors)
    keys = [_key(v, p) for v in names for p in ("open_until", "latency_ms", "fails")]
    values = await cache.aget_many(keys)
    return _assemble(names, values, now=time.time())


def _assemble(
    names: list[str], values: dict[str, object], *, now: float
) -> dict[str, VendorHealth]:
    out: dict[str, VendorHealth] = {}
    for name in names:
        open_until = values.get(_key(name, "open_until"))
        latency = values.get(_key(name, "latency_ms"))
        fails = values.get(_key(name, "fails"))
        out[name] = VendorHealth(
            state=_state_of(open_until if isinstance(open_until, int | float) else None, now=now),
            latency_ms=latency if isinstance(latency, int) else None,
            consecutive_failures=fails if isinstance(fails, int) else 0,
        )
    return out


def record_success(vendor: str, latency_ms: int) -> None:
    """A call to ``vendor`` succeeded in ``latency_ms``: close the circuit, update latency."""
    cache.delete_many([_key(vendor, "fails"), _key(vendor, "open_until"), _key(vendor, "trial")])
    previous = cache.get(_key(vendor, "latency_ms"))
    latest = max(int(latency_ms), 0)
    smoothed = latest if not isinstance(previous, int) else (3 * previous + latest) // 4
    cache.set(_key(vendor, "latency_ms"), smoothed, _TTL_S)


def record_failure(vendor: str) -> CircuitState:
    """A call to ``vendor`` failed (connect error, timeout, 429, 5xx). Returns the new state.

    Opens the circuit at the threshold, and re-opens it at once when the failed call was the
    half-open trial.
    """
    now = time.time()
    cache.add(_key(vendor, "fails"), 0, _TTL_S)
    try:
        fails = cache.incr(_key(vendor, "fails"))
    except ValueError:  # expired between add and incr
        cache.set(_key(vendor, "fails"), 1, _TTL_S)
        fails = 1
    current = _state_of(cache.get(_key(vendor, "open_until")), now=now)
    if current is CircuitState.HALF_OPEN or (
        current is CircuitState.CLOSED and fails >= _threshold()
    ):
        cache.set(_key(vendor, "open_until"), now + _cooldown_s(), _TTL_S)
        cache.delete(_key(vendor, "trial"))
        return CircuitState.OPEN
    return current


def allow_request(vendor: str) -> bool:
    """Whether a call to ``vendor`` may go ahead now.

    Closed: always. Open: never. Half-open: ``True`` for exactly one caller per cool-down (an
    atomic cache ``add``); that caller must report the outcome with :func:`record_success` or
    :func:`record_failure`.
    """
    current = state(vendor)
    if current is CircuitState.CLOSED:
        return True
    if current is CircuitState.OPEN:
        return False
    return bool(cache.add(_key(vendor, "trial"), 1, _cooldown_s()))


def reset(vendor: str) -> None:
    """Forget everything about ``vendor`` (staff action, tests)."""
    cache.delete_many([_key(vendor, p) for p in ("fails", "open_until", "trial", "latency_ms")])


async def astate(vendor: str) -> CircuitState:
    """Async :func:`state`."""
    return _state_of(await cache.aget(_key(vendor, "open_until")), now=time.time())


async def arecord_success(vendor: str, latency_ms: int) -> None:
    """Async :func:`record_success`."""
    await cache.adelete_many(
        [_key(vendor, "fails"), _key(vendor, "open_until"), _key(vendor, "trial")]
    )
    previous = await cache.aget(_key(vendor, "latency_ms"))
    latest = max(int(latency_ms), 0)
    smoothed = latest if not isinstance(previous, int) else (3 * previous + latest) // 4
    await cache.aset(_key(vendor, "latency_ms"), smoothed, _TTL_S)


async def arecord_failure(vendor: str) -> CircuitState:
    """Async :func:`record_failure`."""
    now = time.time()
    await cache.aadd(_key(vendor, "fails"), 0, _TTL_S)
    try:
        fails = await cache.aincr(_key(vendor, "fails"))
    except ValueError:
        await cache.aset(_key(vendor, "fails"), 1, _TTL_S)
        fails = 1
    current = _state_of(await cache.aget(_key(vendor, "open_until")), now=now)
    if current is CircuitState.HALF_OPEN or (
        current is CircuitState.CLOSED and fails >= _threshold()
    ):
        await cache.aset(_key(vendor, "open_until"), now + _cooldown_s(), _TTL_S)
        await cache.adelete(_key(vendor, "trial"))
        return CircuitState.OPEN
    return current


async def allow_request_async(vendor: str) -> bool:
    """Async :func:`allow_request`."""
    current = await astate(vendor)
    if current is CircuitState.CLOSED:
        return True
    if current is CircuitState.OPEN:
        return False
    return bool(await cache.aadd(_key(vendor, "trial"), 1, _cooldown_s()))
