"""The one pricing function. Every cost the platform computes or charges comes from here.

:class:`PriceSnapshot` is an offering's prices at one moment (the catalog builds them from its
``Price`` rows); :class:`Usage` is what one call consumed; :func:`cost_nanos` is the cost of one
at the other, in integer nano-USD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class PriceSnapshot:
    """The prices of one offering in force at one moment, all integer nano-USD.

    ``per_image_nanos`` is keyed ``"<size>/<quality>"`` (``"1024x1024/standard"``); a ``"*"``
    key is the fallback for sizes/qualities not listed. ``price_id`` names the catalog row the
    snapshot was read from (``None`` for a price built in code).

    Every field is the price in force: the catalog's defaults for a row that leaves a price
    empty (cache writes at 1.25× and 2× the input price, reasoning at the output price) are
    applied where the catalog reads the row (``catalog.selectors.price_snapshot``), so a
    snapshot built in code states every price it means — a 0 here is free.
    """

    price_id: int | None = None
    input_per_mtok_nanos: int = 0
    cached_input_per_mtok_nanos: int = 0
    cache_write_5m_per_mtok_nanos: int = 0
    cache_write_1h_per_mtok_nanos: int = 0
    output_per_mtok_nanos: int = 0
    reasoning_per_mtok_nanos: int = 0
    per_image_nanos: Mapping[str, int] = field(default_factory=dict)
    per_mchar_nanos: int = 0
    per_audio_second_nanos: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """What one call consumed, in the units prices are quoted in — OpenAI's semantics, whatever
    the vendor's wire format (``docs/billing.md``, "Prompt cache and reasoning tokens").

    ``input_tokens`` counts every prompt token: cache reads and cache writes included.
    ``cached_input_tokens`` is the part the vendor read from its prompt cache (billed at the
    cached price); ``cache_write_5m_tokens`` / ``cache_write_1h_tokens`` the parts it wrote to
    its cache for five minutes / an hour (billed at the cache-write prices); the rest of
    ``input_tokens`` is billed at the input price. ``output_tokens`` counts every generated
    token, hidden reasoning included; ``reasoning_tokens`` is that part (billed at the
    reasoning price, the rest at the output price). ``images`` maps ``"<size>/<quality>"`` to a
    count; ``audio_ms`` is transcribed audio.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    images: Mapping[str, int] = field(default_factory=dict)
    characters: int = 0
    audio_ms: int = 0


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def image_price_nanos(price: PriceSnapshot, size_quality: str) -> int:
    """Price of one image of ``size_quality`` (falls back to the ``"*"`` entry, else 0)."""
    table = price.per_image_nanos
    if size_quality in table:
        return table[size_quality]
    return table.get("*", 0)


def cost_nanos(*, price: PriceSnapshot, usage: Usage) -> int:
    """The cost of ``usage`` at ``price``, in integer nano-USD.

    Integer arithmetic only. Rounding: each metered group is summed exactly and rounded **up**
    to the next whole nano-USD once — tokens (per 1M), characters (per 1M), audio (per second,
    metered in milliseconds). So a call is never under-charged and never over-charged by more
    than 3 nano-USD. Images are whole prices and need no rounding.

    Each token is priced once (:class:`Usage`): prompt tokens at the cached, cache-write or
    input price, generated tokens at the reasoning or output price.
    """
    written = usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
    uncached = max(usage.input_tokens - usage.cached_input_tokens - written, 0)
    visible = max(usage.output_tokens - usage.reasoning_tokens, 0)
    token_part = (
        uncached * price.input_per_mtok_nanos
        + usage.cached_input_tokens * price.cached_input_per_mtok_nanos
        + usage.cache_write_5m_tokens * price.cache_write_5m_per_mtok_nanos
        + usage.cache_write_1h_tokens * price.cache_write_1h_per_mtok_nanos
        + visible * price.output_per_mtok_nanos
        + usage.reasoning_tokens * price.reasoning_per_mtok_nanos
    )
    total = _ceil_div(token_part, _MILLION)
    total += _ceil_div(usage.characters * price.per_mchar_nanos, _MILLION)
    total += _ceil_div(usage.audio_ms * price.per_audio_second_nanos, 1000)
    total += sum(image_price_nanos(price, key) * n for key, n in usage.images.items())
    return total


def worst_case_usage(
    price: PriceSnapshot, *, input_tokens: int, output_tokens: int, cache_writes: bool = False
) -> Usage:
    """``input_tokens`` of prompt and ``output_tokens`` of output as the :class:`Usage` that
    costs the most at ``price``: every prompt token at the dearest of the input and cached
    prices — and of the cache-write prices when ``cache_writes`` (the request marks part of its
    prompt for caching: only then can a vendor write it to a cache) — every output token at the
    dearer of the output and reasoning prices. What a hold reserves for a call whose split
    (cache reads and writes, hidden reasoning) only the vendor's answer tells, so that no split
    it can report costs more than was held."""
    options = [
        (price.input_per_mtok_nanos, "input"),
        (price.cached_input_per_mtok_nanos, "cached"),
    ]
    if cache_writes:
        options += [
            (price.cache_write_5m_per_mtok_nanos, "write_5m"),
            (price.cache_write_1h_per_mtok_nanos, "write_1h"),
        ]
    prompt = max(options, key=lambda option: option[0])[1]
    reasoning = price.reasoning_per_mtok_nanos > price.output_per_mtok_nanos
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=input_tokens if prompt == "cached" else 0,
        cache_write_5m_tokens=input_tokens if prompt == "write_5m" else 0,
        cache_write_1h_tokens=input_tokens if prompt == "write_1h" else 0,
        output_tokens=output_tokens,
        reasoning_tokens=output_tokens if reasoning else 0,
    )


def discounted(price: PriceSnapshot, *, percent: int) -> PriceSnapshot:
    """``price`` with every rate lowered by ``percent`` (0-100) — the Batch API's price of an
    offering. Each rate is ``rate × (100 − percent) / 100`` rounded up to the nano-USD, so a
    discount never makes a priced unit free; ``price_id`` stays the row it was read from."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be from 0 to 100")
    keep = 100 - percent

    def cut(rate: int) -> int:
        return _ceil_div(rate * keep, 100)

    changes: dict[str, object] = {}
    for f in fields(price):
        value = getattr(price, f.name)
        if f.name == "price_id":
            continue
        if isinstance(value, int):
            changes[f.name] = cut(value)
        elif isinstance(value, Mapping):
            changes[f.name] = {k: cut(int(v)) for k, v in value.items()}
    return replace(price, **changes)  # type: ignore[arg-type]
