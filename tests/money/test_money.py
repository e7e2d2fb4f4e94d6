"""money: the cost of a call and the conversions at the edges, in integer nano-USD."""

from __future__ import annotations

from decimal import Decimal

import pytest

from money.pricing import PriceSnapshot, Usage, cost_nanos
from money.usd import nanos_to_cents, nanos_to_usd_str, usd_to_nanos

PRICE = PriceSnapshot(
    input_per_mtok_nanos=2_500_000_000,  # $2.50 per 1M input tokens
    cached_input_per_mtok_nanos=1_250_000_000,
    output_per_mtok_nanos=10_000_000_000,
    per_image_nanos={"1024x1024/standard": 40_000_000, "*": 80_000_000},
    per_mchar_nanos=15_000_000_000,
    per_audio_second_nanos=100_000,
)


def test_cached_prompt_tokens_are_billed_at_the_cached_price() -> None:
    usage = Usage(input_tokens=1_000, cached_input_tokens=400, output_tokens=100)
    # 600 × 2500 + 400 × 1250 + 100 × 10000 nano-USD per token
    assert cost_nanos(price=PRICE, usage=usage) == 1_500_000 + 500_000 + 1_000_000


def test_each_metered_group_is_rounded_up_once() -> None:
    # One token at $0.000001 per 1M is a millionth of a nano-USD: billed as 1, never 0.
    tiny = PriceSnapshot(input_per_mtok_nanos=1, per_mchar_nanos=1, per_audio_second_nanos=1)
    assert cost_nanos(price=tiny, usage=Usage(input_tokens=1)) == 1
    assert cost_nanos(price=tiny, usage=Usage(input_tokens=1, characters=1, audio_ms=1)) == 3
    assert cost_nanos(price=tiny, usage=Usage(input_tokens=1_000_000)) == 1


def test_images_use_their_size_and_fall_back_to_the_star_price() -> None:
    usage = Usage(images={"1024x1024/standard": 2, "512x512/hd": 1})
    assert cost_nanos(price=PRICE, usage=usage) == 2 * 40_000_000 + 80_000_000
    no_star = PriceSnapshot(per_image_nanos={"1024x1024/standard": 7})
    assert cost_nanos(price=no_star, usage=Usage(images={"256x256/standard": 3})) == 0


def test_usd_round_trips_exactly() -> None:
    assert usd_to_nanos(Decimal("0.000000001")) == 1
    assert nanos_to_usd_str(123_000) == "0.000123"
    assert nanos_to_usd_str(-5 * 10**9) == "-5"
    assert nanos_to_cents(1_250_000_000) == 125


@pytest.mark.parametrize(
    ("convert", "value"),
    [
        (usd_to_nanos, Decimal("0.0000000001")),  # a tenth of a nano-USD
        (nanos_to_cents, 1),  # not a whole cent
    ],
)
def test_amounts_that_are_not_whole_units_are_refused(convert: object, value: object) -> None:
    with pytest.raises(ValueError):
        convert(value)  # type: ignore[operator]
