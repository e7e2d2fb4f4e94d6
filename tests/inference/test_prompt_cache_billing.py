"""Prompt-cache reads and writes and hidden reasoning, billed the same whatever the vendor's wire
format: the live app driven by the official ``openai`` SDK against the fake vendors, which
report the same cached conversation in OpenAI's semantics (``primary``: cache reads and writes
are parts of ``prompt_tokens``) and Anthropic's (``anthro``: ``input_tokens`` excludes them).
Each case checks the ledger entry, the request log and the money audit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from billing.audit import audit_findings
from billing.models import Hold, HoldStatus
from catalog.documents import catalog_load
from inference.models import RequestLog
from money.pricing import Usage
from money.usd import nanos_to_usd_str
from tests.catalog_docs import PRICE, catalog_model, offering
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import assert_billed, offering_price

pytestmark = pytest.mark.django_db(transaction=True)

# 40 prompt tokens to the fakes (one per word); the answer "Echo: …" is 41.
CONVERSATION = [{"role": "user", "content": " ".join(["alpha beta gamma delta"] * 10)}]
PROMPT_TOKENS, OUTPUT_TOKENS = 40, 41
READS, WRITES = 20, 12  # of the 40: 20 read from the cache, 12 written to it, 8 fresh


def _ask(client: openai.OpenAI, model: str, *, stream: bool) -> tuple[str, Any, dict[str, Any]]:
    """``(text, usage, infrai)`` of one chat call, whole or streamed."""
    if not stream:
        resp = client.chat.completions.create(model=model, messages=CONVERSATION)
        return resp.choices[0].message.content or "", resp.usage, resp.infrai  # type: ignore[attr-defined]
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=CONVERSATION,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]
    return text, last.usage, last.infrai  # type: ignore[attr-defined]


def _books_clean() -> None:
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []


def _cache(vendor: FakeVendor, *, reads: int = 0, writes_5m: int = 0, writes_1h: int = 0) -> None:
    vendor.cache_reads, vendor.cache_writes_5m, vendor.cache_writes_1h = reads, writes_5m, writes_1h


@pytest.mark.parametrize("stream", [False, True])
def test_the_same_cached_conversation_costs_the_same_on_both_wire_formats(
    stream, issue_key, client_for, fake_catalog
):
    _cache(fake_catalog["primary"], reads=READS, writes_5m=WRITES)
    _cache(fake_catalog["anthro"], reads=READS, writes_5m=WRITES)
    client = client_for(issue_key())
    usage = Usage(
        input_tokens=PROMPT_TOKENS,
        cached_input_tokens=READS,
        cache_write_5m_tokens=WRITES,
        output_tokens=OUTPUT_TOKENS,
    )
    costs = []
    for model, vendor in (("test-large", "primary"), ("claude-fake", "anthro")):
        text, reported, infrai = _ask(client, model, stream=stream)
        assert text.startswith("Echo: alpha") and infrai["vendor"] == vendor
        # Told to the client in OpenAI's semantics whatever the vendor's.
        assert (reported.prompt_tokens, reported.completion_tokens) == (
            PROMPT_TOKENS,
            OUTPUT_TOKENS,
        )
        assert reported.prompt_tokens_details.cached_tokens == READS
        assert reported.prompt_tokens_details.cache_write_tokens == WRITES
        cost = assert_billed(infrai["request_id"], model=model, vendor=vendor, usage=usage)
        assert infrai["cost_nanos"] == cost
        log = RequestLog.objects.get(request_id=infrai["request_id"])
        assert (log.input_tokens, log.cached_input_tokens, log.cache_write_tokens) == (
            PROMPT_TOKENS,
            READS,
            WRITES,
        )
        costs.append(cost)
    # PRICE: $1 fresh, $0.50 read, $1.25 written (the default 1.25×), $2 output per 1M.
    assert costs == [8 * 1_000 + READS * 500 + WRITES * 1_250 + OUTPUT_TOKENS * 2_000] * 2
    _books_clean()


def test_anthropic_one_hour_cache_writes_are_billed_at_the_one_hour_price(
    issue_key, client_for, fake_catalog
):
    _cache(fake_catalog["anthro"], writes_5m=4, writes_1h=10)
    text, reported, infrai = _ask(client_for(issue_key()), "claude-fake", stream=False)
    assert text.startswith("Echo: alpha")
    assert reported.prompt_tokens == PROMPT_TOKENS
    assert reported.prompt_tokens_details.cache_write_tokens == 14  # both lifetimes
    usage = Usage(
        input_tokens=PROMPT_TOKENS,
        cache_write_5m_tokens=4,
        cache_write_1h_tokens=10,
        output_tokens=OUTPUT_TOKENS,
    )
    cost = assert_billed(infrai["request_id"], model="claude-fake", vendor="anthro", usage=usage)
    # 26 fresh at $1, 4 written for 5 minutes at $1.25, 10 for an hour at $2 (2×), 41 at $2.
    assert cost == 26 * 1_000 + 4 * 1_250 + 10 * 2_000 + OUTPUT_TOKENS * 2_000
    assert RequestLog.objects.get(request_id=infrai["request_id"]).cache_write_tokens == 14
    _books_clean()


THINKER_PRICE = {**PRICE, "reasoning_per_mtok_usd": "8.00"}  # output $2, reasoning $8


@pytest.fixture
def thinker(fake_catalog: dict[str, FakeVendor]) -> FakeVendor:
    """``test-thinker`` on ``primary``, its hidden reasoning priced apart from its output."""
    catalog_load(
        {
            "models": [
                catalog_model(
                    "test-thinker",
                    capabilities=["chat"],
                    offerings=[offering("primary", "up-large", THINKER_PRICE)],
                )
            ]
        }
    )
    vendor = fake_catalog["primary"]
    vendor.fault, vendor.reasoning_tokens = "usage_reasoning", 30
    return vendor


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_tokens_are_billed_at_the_reasoning_price_and_held_for(
    stream, issue_key, client_for, thinker
):
    client = client_for(issue_key())
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="test-thinker",
                messages=[{"role": "user", "content": "alpha beta gamma delta"}],
                max_tokens=100,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        reported, infrai = chunks[-1].usage, chunks[-1].infrai  # type: ignore[attr-defined]
    else:
        resp = client.chat.completions.create(
            model="test-thinker",
            messages=[{"role": "user", "content": "alpha beta gamma delta"}],
            max_tokens=100,
        )
        reported, infrai = resp.usage, resp.infrai  # type: ignore[attr-defined]
    # "Echo: alpha beta gamma delta": 5 visible tokens and 30 of hidden reasoning.
    assert reported.completion_tokens == 35
    assert reported.completion_tokens_details.reasoning_tokens == 30
    usage = Usage(input_tokens=4, output_tokens=35, reasoning_tokens=30)
    cost = assert_billed(infrai["request_id"], model="test-thinker", vendor="primary", usage=usage)
    assert cost == 4 * 1_000 + 5 * 2_000 + 30 * 8_000  # not 35 × $2, nor 35 + 30 tokens
    assert RequestLog.objects.get(request_id=infrai["request_id"]).reasoning_tokens == 30
    # The hold priced every one of the 100 allowed output tokens as reasoning.
    assert Hold.objects.get(request_id=infrai["request_id"]).amount_nanos >= 100 * 8_000
    _books_clean()


def test_the_docs_example_runs_verbatim(issue_key, api_base, fake_catalog, monkeypatch, capsys):
    for vendor in fake_catalog.values():  # whichever "auto" picks reports the same cache use
        _cache(vendor, reads=3, writes_5m=2)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = doc.split("## Prompt-cache and reasoning usage", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("INFRAI_BASE_URL", api_base)
    monkeypatch.setenv("INFRAI_API_KEY", issue_key())
    exec(compile(example, "docs/api.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    # "Tell me about prompt caching in one sentence." is 8 words: 3 read, 2 written.
    assert printed[0] == "8 3 2"
    assert printed[1] == "9 0"  # "Echo: …" and no reasoning
    log = RequestLog.objects.get()
    assert (log.cached_input_tokens, log.cache_write_tokens) == (3, 2)
    price = offering_price(log.model, log.vendor)
    # The model's catalog row leaves them empty: 1.25 × its input price, its output price.
    assert printed[2] == " ".join(
        nanos_to_usd_str(n)
        for n in (price.input_per_mtok_nanos * 5 // 4, price.output_per_mtok_nanos)
    )
    usage = Usage(input_tokens=8, cached_input_tokens=3, cache_write_5m_tokens=2, output_tokens=9)
    cost = assert_billed(log.request_id, model=log.model, vendor=log.vendor, usage=usage)
    assert log.cost_nanos == cost and float(printed[3]) == cost / 10**9
    _books_clean()
