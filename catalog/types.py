"""Plain value types the catalog hands to other apps (no ORM objects cross app borders)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PriceSnapshot:
    """The prices of one offering in force at one moment, all integer nano-USD.

    ``per_image_nanos`` is keyed ``"<size>/<quality>"`` (``"1024x1024/standard"``); a ``"*"``
    key is the fallback for sizes/qualities not listed.
    """

    price_id: int | None = None
    input_per_mtok_nanos: int = 0
    cached_input_per_mtok_nanos: int = 0
    output_per_mtok_nanos: int = 0
    per_image_nanos: Mapping[str, int] = field(default_factory=dict)
    per_mchar_nanos: int = 0
    per_audio_second_nanos: int = 0
