"""A circuit breaker per vendor, shared by every process through Redis (:mod:`infra.fastcache`).

States: *closed* (calls flow), *open* (``INFRAI_CIRCUIT_FAILURE_THRESHOLD`` consecutive failures
— default 5 — stop calls for ``INFRAI_CIRCUIT_COOLDOWN_S`` seconds, default 30), *half-open*
(the cool-down passed: exactly one caller wins :func:`allow_request` and tries; its success
closes the circuit, its failure opens it for another cool-down).

Feeds: live traffic (the request path calls :func:`arecord_success` / :func:`arecord_failure`
after each vendor call) and the beat probe (:mod:`catalog.tasks`). Latency is an exponential
moving average (weight 1/4 for the newest sample) in whole milliseconds, kept per process and
published to the shared store when it moved by at least a quarter (and 5 ms) since this process
last published it, and otherwise at most once every ``_PUBLISH_EVERY_S`` seconds — not on
every call (a steady vendor costs no write per call).

Hot-path cost: :func:`ahealth_of` is one ``MGET`` (its answer is reused for
``INFRAI_HEALTH_MEMO_S`` seconds, default 0.5, unless this process records a change) and a
success costs no round trip unless the circuit was suspect or the latency is due to be
published. Keys (prefix ``circuit:<vendor>:``): ``fails`` (consecutive
failures), ``open_until`` (unix seconds), ``trial`` (the half-open token), ``latency_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from django.conf import settings

from catalog.types import CircuitState, VendorHealth
from infra import fastcache

_TTL_S = 7 * 24 * 3600
_PARTS = ("fails", "open_until", "trial", "latency_ms")
# This process's view: the last shared state read, and its own latency averages.
_memo: dict[tuple[str, ...], tuple[float, dict[str, VendorHealth]]] = {}
_latency: dict[str, int] = {}
# What this process last published per vendor: (monotonic time, latency_ms, store generation).
_published: dict[str, tuple[float, int, int]] = {}
_PUBLISH_EVERY_S = 1.0


def _threshold() -> int:
    return int(settings.INFRAI_CIRCUIT_FAILURE_THRESHOLD)


def _cooldown_s() -> int:
    return int(settings.INFRAI_CIRCUIT_COOLDOWN_S)


def _memo_s() -> float:
    return float(settings.INFRAI_HEALTH_MEMO_S)


def _key(vendor: str, part: str) -> str:
    return f"circuit:{vendor}:{part}"


def _state_of(open_until: float | None, *, now: float) -> CircuitState:
    if open_until is None:
        return CircuitState.CLOSED
    return CircuitState.OPEN if now < open_until else CircuitState.HALF_OPEN


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


def _forget_memo() -> None:
    _memo.clear()


def _suspect(vendor: str) -> bool:
    """Whether the last state this process read shows failures or a non-closed circuit."""
    for _, health in _memo.values():
        seen = health.get(vendor)
        if seen is not None and (
            seen.consecutive_failures or seen.state is not CircuitState.CLOSED
        ):
            return True
    return not _memo  # nothing read yet: reset to be sure


# --- async (the request path) -----------------------------------------------------------------


async def ahealth_of(vendors: Iterable[str]) -> dict[str, VendorHealth]:
    """State, latency and failure count of each vendor, in one round trip (memoised briefly)."""
    names = tuple(vendors)
    now = time.time()
    held = _memo.get(names)
    if held is not None and time.monotonic() - held[0] < _memo_s():
        return held[1]
    values = await fastcache.get_many([_key(v, p) for v in names for p in _PARTS])
    found = _assemble(list(names), values, now=now)
    _memo[names] = (time.monotonic(), found)
    return found


async def astate(vendor: str) -> CircuitState:
    """The circuit state of ``vendor`` now (not memoised)."""
    return _state_of(await fastcache.get(_key(vendor, "open_until")), now=time.time())


async def arecord_success(vendor: str, latency_ms: int) -> None:
    """A call to ``vendor`` succeeded in ``latency_ms``: close the circuit, update latency."""
    latest = max(int(latency_ms), 0)
    previous = _latency.get(vendor)
    smoothed = latest if previous is None else (3 * previous + latest) // 4
    _latency[vendor] = smoothed
    if _suspect(vendor):
        await fastcache.delete_many([_key(vendor, p) for p in ("fails", "open_until", "trial")])
        _forget_memo()
    now = time.monotonic()
    last = _published.get(vendor)
    if (
        last is not None
        and now - last[0] < _PUBLISH_EVERY_S
        and last[2] == fastcache.generation
        and (abs(smoothed - last[1]) < 5 or abs(smoothed - last[1]) * 4 < last[1])
    ):
        return
    _published[vendor] = (now, smoothed, fastcache.generation)
    await fastcache.set(_key(vendor, "latency_ms"), smoothed, _TTL_S)


async def arecord_failure(vendor: str) -> CircuitState:
    """A call to ``vendor`` failed (connect error, timeout, 429, 5xx). Returns the new state.

    Opens the circuit at the threshold, and re-opens it at once when the failed call was the
    half-open trial.
    """
    now = time.time()
    (fails,) = await fastcache.incr_many([(_key(vendor, "fails"), 1)], _TTL_S)
    _forget_memo()
    current = await astate(vendor)
    if current is CircuitState.HALF_OPEN or (
        current is CircuitState.CLOSED and fails >= _threshold()
    ):
        await fastcache.set(_key(vendor, "open_until"), now + _cooldown_s(), _TTL_S)
        await fastcache.delete(_key(vendor, "trial"))
        return CircuitState.OPEN
    return current


async def allow_request_async(vendor: str) -> bool:
    """Whether a call to ``vendor`` may go ahead now.

    Closed: always. Open: never. Half-open: ``True`` for exactly one caller per cool-down (an
    atomic ``SET NX``); that caller must report the outcome with :func:`arecord_success` or
    :func:`arecord_failure`.
    """
    current = await astate(vendor)
    if current is CircuitState.CLOSED:
        return True
    if current is CircuitState.OPEN:
        return False
    return await fastcache.add(_key(vendor, "trial"), 1, _cooldown_s())


async def areset(vendor: str) -> None:
    """Forget everything about ``vendor`` (staff action, tests)."""
    _latency.pop(vendor, None)
    _published.pop(vendor, None)
    _forget_memo()
    await fastcache.delete_many([_key(vendor, p) for p in _PARTS])


# --- sync twins (admin, probe task, management commands) -------------------------------------


def health_of(vendors: Iterable[str]) -> dict[str, VendorHealth]:
    """:func:`ahealth_of` for sync code (always reads the shared state)."""
    _forget_memo()
    return async_to_sync(ahealth_of)(list(vendors))


def state(vendor: str) -> CircuitState:
    """:func:`astate` for sync code."""
    return async_to_sync(astate)(vendor)


def record_success(vendor: str, latency_ms: int) -> None:
    """:func:`arecord_success` for sync code."""
    async_to_sync(arecord_success)(vendor, latency_ms)


def record_failure(vendor: str) -> CircuitState:
    """:func:`arecord_failure` for sync code."""
    return async_to_sync(arecord_failure)(vendor)


def allow_request(vendor: str) -> bool:
    """:func:`allow_request_async` for sync code."""
    return async_to_sync(allow_request_async)(vendor)


def reset(vendor: str) -> None:
    """:func:`areset` for sync code."""
    async_to_sync(areset)(vendor)
