"""Per-key rate limits: requests and tokens per minute, shared across processes (Redis).

Fixed one-minute windows, counted with one pipelined round trip per call — the same round trip
that confirms the caller's key is still current (:func:`accounts.auth.confirm`). Tokens are counted
when the call is admitted, at the request's estimate (prompt + the output it may produce), as
OpenAI does. The ``x-ratelimit-*`` headers follow OpenAI's names and formats.

A call estimated at more tokens than the key may use in a whole minute can never pass: it is a
400 (never a 429 whose ``retry-after`` cannot help), and what its round trip counted is taken
back at once. An estimate (a size-capped body's prompt plus under 2**31 output tokens per
choice) stays far inside Redis' 64-bit INCRBY.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from accounts import auth
from accounts.auth import KeyContext
from config.errors import ApiError, InvalidRequest, RateLimited
from infra import fastcache

WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class LimitState:
    """The counters after admitting (or refusing) one call."""

    limit_requests: int
    remaining_requests: int
    limit_tokens: int
    remaining_tokens: int
    reset_s: float

    def headers(self) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers."""
        reset = f"{max(self.reset_s, 0.0):.3f}".rstrip("0").rstrip(".") + "s"
        return {
            "x-ratelimit-limit-requests": str(self.limit_requests),
            "x-ratelimit-remaining-requests": str(max(self.remaining_requests, 0)),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-limit-tokens": str(self.limit_tokens),
            "x-ratelimit-remaining-tokens": str(max(self.remaining_tokens, 0)),
            "x-ratelimit-reset-tokens": reset,
        }


async def admit(key: KeyContext, *, tokens: int) -> tuple[LimitState, KeyContext]:
    """Count one call of ``tokens`` estimated tokens against ``key``'s limits, and confirm the
    key (:func:`accounts.auth.confirm`) in the same round trip.

    Returns the state for the response headers and the key's current context (limits are
    checked against it), or raises :class:`RateLimited` (429 with ``retry-after`` in whole
    seconds and the same headers). A refused call still counts as a request in its window (so
    hammering does not help), but its tokens are not kept. A call of more tokens than the key's
    whole per-minute limit raises :class:`InvalidRequest` (400, ``x-should-retry: false``) and
    keeps nothing counted, nor does a key revoked or expired since ``key`` was read (its 401).
    """
    tokens = max(int(tokens), 0)
    now = time.time()
    window = int(now // WINDOW_S)
    reset_s = (window + 1) * WINDOW_S - now
    # Under the key's hash tag, as its cache entry: one slot, one round trip in a cluster.
    base = f"rl:{auth.slot_tag(key.key_hash)}:{window}"
    cached, (requests, used_tokens) = await fastcache.get_raw_and_incr_many(
        auth.cache_key(key.key_hash), [(base + ":r", 1), (base + ":t", tokens)], WINDOW_S + 5
    )
    try:
        key = await auth.confirm(key, cached)
        _refuse_if_never_passes(key, tokens)
    except ApiError:  # nothing stays counted (the key's limits are the confirmed ones)
        await fastcache.incr_many([(base + ":r", -1), (base + ":t", -tokens)], WINDOW_S + 5)
        raise
    state = LimitState(
        limit_requests=key.requests_per_minute,
        remaining_requests=key.requests_per_minute - requests,
        limit_tokens=key.tokens_per_minute,
        remaining_tokens=key.tokens_per_minute - used_tokens,
        reset_s=reset_s,
    )
    over_requests = requests > key.requests_per_minute
    over_tokens = used_tokens > key.tokens_per_minute
    if over_requests or over_tokens:
        await fastcache.incr_many([(base + ":t", -tokens)], WINDOW_S + 5)
        what = "requests" if over_requests else "tokens"
        limit = key.requests_per_minute if over_requests else key.tokens_per_minute
        raise RateLimited(
            f"Rate limit reached for this API key: {limit} {what} per minute. "
            f"Try again in {math.ceil(reset_s)}s.",
            code="rate_limit_exceeded",
            headers={"retry-after": str(math.ceil(reset_s)), **state.headers()},
        )
    return state, key


def _refuse_if_never_passes(key: KeyContext, tokens: int) -> None:
    """The 400 for a call estimated at more tokens than ``key`` may use in a whole minute."""
    if tokens > key.tokens_per_minute:
        raise InvalidRequest(
            f"This request may use up to {tokens} tokens (prompt + max output), more than this "
            f"API key's limit of {key.tokens_per_minute} tokens per minute, so it can never "
            "pass: lower max_tokens (or max_completion_tokens), shorten the input, or raise the "
            "key's limit.",
            code="invalid_value",
        )
