"""money: prompt-cache reads and writes and hidden reasoning, each token priced exactly once."""

from __future__ import annotations

import itertools

from money.pricing import PriceSnapshot, Usage, cost_nanos, worst_case_usage

PRICE = PriceSnapshot(
    input_per_mtok_nanos=3_000_000_000,  # $3 per 1M prompt tokens
    cached_input_per_mtok_nanos=300_000_000,  # cache reads: $0.30
    cache_write_5m_per_mtok_nanos=3_750_000_000,  # 5-minute writes: $3.75
    cache_write_1h_per_mtok_nanos=6_000_000_000,  # 1-hour writes: $6
    output_per_mtok_nanos=15_000_000_000,  # $15 per 1M output tokens
    reasoning_per_mtok_nanos=20_000_000_000,  # hidden reasoning: $20
)


def test_each_prompt_and_output_token_is_priced_once_at_its_own_price() -> None:
    usage = Usage(
        input_tokens=1_000,  # all of the prompt: 400 fresh + 300 read + 200 + 100 written
        cached_input_tokens=300,
        cache_write_5m_tokens=200,
        cache_write_1h_tokens=100,
        output_tokens=500,  # all of the output: 380 visible + 120 reasoning
        reasoning_tokens=120,
    )
    assert cost_nanos(price=PRICE, usage=usage) == (
        400 * 3_000 + 300 * 300 + 200 * 3_750 + 100 * 6_000 + 380 * 15_000 + 120 * 20_000
    )


def test_reasoning_is_part_of_the_output_not_added_to_it() -> None:
    all_reasoning = Usage(output_tokens=100, reasoning_tokens=100)
    assert cost_nanos(price=PRICE, usage=all_reasoning) == 100 * 20_000
    same_price = PriceSnapshot(
        output_per_mtok_nanos=15_000_000_000, reasoning_per_mtok_nanos=15_000_000_000
    )
    split = Usage(output_tokens=100, reasoning_tokens=40)
    assert cost_nanos(price=same_price, usage=split) == cost_nanos(
        price=same_price, usage=Usage(output_tokens=100)
    )


def test_cache_writes_are_part_of_the_prompt_not_added_to_it() -> None:
    written = Usage(input_tokens=10, cache_write_5m_tokens=4, cache_write_1h_tokens=6)
    assert cost_nanos(price=PRICE, usage=written) == 4 * 3_750 + 6 * 6_000


def test_the_token_groups_are_rounded_up_once_together() -> None:
    tiny = PriceSnapshot(
        input_per_mtok_nanos=1,
        cached_input_per_mtok_nanos=1,
        cache_write_5m_per_mtok_nanos=1,
        cache_write_1h_per_mtok_nanos=1,
        output_per_mtok_nanos=1,
        reasoning_per_mtok_nanos=1,
    )
    usage = Usage(
        input_tokens=4,
        cached_input_tokens=1,
        cache_write_5m_tokens=1,
        cache_write_1h_tokens=1,
        output_tokens=2,
        reasoning_tokens=1,
    )
    assert cost_nanos(price=tiny, usage=usage) == 1  # six millionths of a nano-USD: 1, not 6


def test_the_worst_case_costs_at_least_every_split_of_the_same_tokens() -> None:
    prompt, output = 12, 7
    worst = cost_nanos(
        price=PRICE,
        usage=worst_case_usage(PRICE, input_tokens=prompt, output_tokens=output, cache_writes=True),
    )
    assert worst == 12 * 6_000 + 7 * 20_000  # all 1-hour writes, all reasoning
    for read, w5, w1h in itertools.product(range(0, prompt + 1, 3), repeat=3):
        if read + w5 + w1h > prompt:
            continue
        for reasoning in range(output + 1):
            usage = Usage(
                input_tokens=prompt,
                cached_input_tokens=read,
                cache_write_5m_tokens=w5,
                cache_write_1h_tokens=w1h,
                output_tokens=output,
                reasoning_tokens=reasoning,
            )
            assert cost_nanos(price=PRICE, usage=usage) <= worst


def test_a_prompt_not_marked_for_caching_is_held_at_its_dearest_read_or_input_price() -> None:
    # Without cache markers no vendor writes the prompt to a cache: the hold does not double.
    worst = worst_case_usage(PRICE, input_tokens=12, output_tokens=7)
    assert (worst.cache_write_5m_tokens, worst.cache_write_1h_tokens) == (0, 0)
    assert cost_nanos(price=PRICE, usage=worst) == 12 * 3_000 + 7 * 20_000
    for read in range(13):
        split = Usage(input_tokens=12, cached_input_tokens=read, output_tokens=7)
        assert cost_nanos(price=PRICE, usage=split) <= cost_nanos(price=PRICE, usage=worst)


def test_the_worst_case_of_a_plain_price_is_the_plain_usage() -> None:
    plain = PriceSnapshot(
        input_per_mtok_nanos=1_000,
        cached_input_per_mtok_nanos=500,
        cache_write_5m_per_mtok_nanos=1_000,
        cache_write_1h_per_mtok_nanos=1_000,
        output_per_mtok_nanos=2_000,
        reasoning_per_mtok_nanos=2_000,
    )
    assert worst_case_usage(plain, input_tokens=5, output_tokens=3) == Usage(
        input_tokens=5, output_tokens=3
    )
