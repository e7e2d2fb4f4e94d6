"""The one pricing function. Every cost the platform computes or charges comes from here.

:class:`PriceSnapshot` is an offering's prices at one moment (the catalog builds them from its
``Price`` rows); :class:`Usage` is what one call consumed; :func:`cost_nanos` is the cost of one
at the other, in integer nano-USD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class PriceSnapshot:
    """The prices of one offering in force at one moment, all integer nano-USD.

    ``per_image_nanos`` is keyed ``"<size>/<quality>"`` (``"1024x1024/standard"``); a ``"*"``
    key is the fallback for sizes/qualities not listed. ``price_id`` names the catalog row the
    snapshot was read from (``None`` for a price built in code).
    """

    price_id: int | None = None
    input_per_mtok_nanos: int = 0
    cached_input_per_mtok_nanos: int = 0
    output_per_mtok_nanos: int = 0
    per_image_nanos: Mapping[str, int] = field(default_factory=dict)
    per_mchar_nanos: int = 0
    per_audio_second_nanos: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """What one call consumed, in the units prices are quoted in.

    ``input_tokens`` counts every prompt token, cached ones included; ``cached_input_tokens`` is
    the part of them the vendor served from its prompt cache (billed at the cached price).
    ``images`` maps ``"<size>/<quality>"`` to a count; ``audio_ms`` is transcribed audio.
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
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
    """
    uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
    token_part = (
        uncached * price.input_per_mtok_nanos
        + usage.cached_input_tokens * price.cached_input_per_mtok_nanos
        + usage.output_tokens * price.output_per_mtok_nanos
    )
    total = _ceil_div(token_part, _MILLION)
    total += _ceil_div(usage.characters * price.per_mchar_nanos, _MILLION)
    total += _ceil_div(usage.audio_ms * price.per_audio_second_nanos, 1000)
    total += sum(image_price_nanos(price, key) * n for key, n in usage.images.items())
    return total
