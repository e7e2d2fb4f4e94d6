"""Vendor usage against the relay: a vendor is billed on its usage only where that is plausible
against what the gateway relayed and the output cap (``inference.usage.reconcile``).

End-to-end cases drive the live app with a fake vendor that misreports (``FakeVendor.fault``:
``usage_zero``, ``usage_absurd``, ``usage_reasoning``, ``ignores_max_tokens``, ``huge_chunks``,
or ``omit_usage``), streamed and not, and assert the ledger's entry, ``infrai.cost_nanos`` and
the request log's ``usage_source``. The rule itself is checked at its edges as a pure function.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from billing.audit import audit_findings
from inference import tokens
from inference.chat.validation import parse_chat_request
from inference.models import RequestLog, RequestStatus, UsageSource
from inference.usage import (
    OUTPUT_CAP_SLACK,
    TOKEN_SLACK,
    TOKENIZER_RATIO,
    Relayed,
    UsageReport,
    reconcile,
    stream_cut_tokens,
)
from money.pricing import Usage
from tests.inference.conftest import assert_billed
from tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PROMPT = "alpha beta gamma delta"
CHAT: dict[str, Any] = {"model": "test-large", "messages": [{"role": "user", "content": PROMPT}]}
ECHO = "Echo: " + PROMPT
TEST_LARGE_OUTPUT_LIMIT = 4096  # catalog_model's default max_output_tokens


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Our count of ``body``'s prompt, as the gateway bills it when it counts."""
    return parse_chat_request(body).prompt_tokens


def _disagreements(source: str) -> float:
    value = REGISTRY.get_sample_value(
        "infrai_vendor_usage_disagreements_total", {"vendor": "primary", "source": source}
    )
    return value or 0.0


def _call(client: Any, body: dict[str, Any], *, stream: bool) -> tuple[str, dict[str, Any]]:
    """``(delivered text, infrai)`` of a chat call through the SDK."""
    if not stream:
        resp = client.chat.completions.create(**body)
        return resp.choices[0].message.content or "", resp.infrai
    chunks = list(client.chat.completions.create(**body, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, next(c.infrai for c in chunks if getattr(c, "infrai", None))


def _billed(infrai: dict[str, Any], usage: Usage, source: UsageSource) -> RequestLog:
    """The ledger charged ``usage`` at test-large's price on primary, ``infrai`` says that
    cost, and the request log records ``usage`` as coming from ``source``."""
    cost = assert_billed(infrai["request_id"], model="test-large", vendor="primary", usage=usage)
    assert cost > 0 and infrai["cost_nanos"] == cost
    log = RequestLog.objects.get(request_id=infrai["request_id"])
    assert (log.status, log.usage_source, log.cost_nanos) == (RequestStatus.OK, source, cost)
    assert (log.input_tokens, log.output_tokens) == (usage.input_tokens, usage.output_tokens)
    assert audit_findings().findings == []
    return log


# --- end to end ------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_plausible_vendor_usage_is_billed_as_reported(stream, issue_key, client_for, fake_catalog):
    before = _disagreements("counted")
    text, infrai = _call(client_for(issue_key()), CHAT, stream=stream)
    assert text == ECHO and "usage_estimated" not in infrai
    # the fake counts words: 4 prompt, 5 reply — its tokenizer, not ours, and within the band
    log = _billed(infrai, Usage(input_tokens=4, output_tokens=5), UsageSource.VENDOR)
    assert log.error_code == ""
    assert _disagreements("counted") == before


@pytest.mark.parametrize("stream", [False, True])
def test_zero_usage_with_content_delivered_is_billed_by_our_count(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "usage_zero"
    before = _disagreements("counted")
    text, infrai = _call(client_for(issue_key()), CHAT, stream=stream)
    assert text == ECHO and infrai["usage_estimated"] is True
    counted = Usage(input_tokens=_prompt_tokens(CHAT), output_tokens=tokens.count_text(ECHO))
    log = _billed(infrai, counted, UsageSource.COUNTED)
    assert log.error_code == "vendor_usage_implausible"
    assert _disagreements("counted") == before + 1


@pytest.mark.parametrize("stream", [False, True])
def test_absent_usage_with_content_delivered_is_billed_by_our_count(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].omit_usage = True
    text, infrai = _call(client_for(issue_key()), CHAT, stream=stream)
    assert text == ECHO
    counted = Usage(input_tokens=_prompt_tokens(CHAT), output_tokens=tokens.count_text(ECHO))
    log = _billed(infrai, counted, UsageSource.COUNTED)
    assert log.error_code == "vendor_usage_missing"


@pytest.mark.parametrize("stream", [False, True])
def test_an_absurd_completion_claim_is_replaced_by_our_count(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "usage_absurd"  # 99,999,999 completion tokens
    body = {**CHAT, "max_tokens": 50}
    text, infrai = _call(client_for(issue_key()), body, stream=stream)
    assert text == ECHO
    # the prompt's 4 (the vendor's, plausible) stays; the output is what was relayed
    counted = Usage(input_tokens=4, output_tokens=tokens.count_text(ECHO))
    log = _billed(infrai, counted, UsageSource.COUNTED)
    assert log.error_code == "vendor_usage_implausible"


def test_an_answer_past_max_tokens_is_delivered_whole_and_billed_at_the_cap(
    issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "ignores_max_tokens"  # 200 words, claims 10 tokens
    before = _disagreements("capped")
    text, infrai = _call(client_for(issue_key()), {**CHAT, "max_tokens": 20}, stream=False)
    assert text.split() == ["word"] * 200  # not truncated
    _billed(infrai, Usage(input_tokens=4, output_tokens=20), UsageSource.CAPPED)
    assert _disagreements("capped") == before + 1


def test_a_stream_past_max_tokens_is_cut_with_finish_reason_length(
    issue_key, client_for, fake_catalog
):
    vendor = fake_catalog["primary"]
    vendor.fault = "ignores_max_tokens"
    vendor.chunk_delay_s = 0.02  # 4 s for its 200 words: the cut comes long before the end
    client = client_for(issue_key(), timeout=30)
    chunks = list(client.chat.completions.create(**CHAT, max_tokens=20, stream=True))
    choices = [c.choices[0] for c in chunks if c.choices]
    assert [c.finish_reason for c in choices[:-1]] == [None] * (len(choices) - 1)
    assert choices[-1].finish_reason == "length" and choices[-1].delta.content is None
    delivered = "".join(c.delta.content or "" for c in choices)
    cut_at = stream_cut_tokens(20)
    assert cut_at < tokens.count_text(delivered) <= cut_at + 1  # one word is one token
    assert vendor.stream_closed.wait(10) and vendor.chunks_sent < 200  # upstream closed
    # cut before the vendor reported anything: both sides are our count
    usage = Usage(input_tokens=_prompt_tokens(CHAT), output_tokens=20)
    log = _billed(chunks[-1].infrai, usage, UsageSource.CAPPED)
    assert log.error_code == "vendor_exceeded_output_cap"


def test_a_cut_stream_ends_with_its_usage_chunk_and_done(api_base, issue_key, fake_catalog):
    fake_catalog["primary"].fault = "ignores_max_tokens"
    body = {**CHAT, "max_tokens": 20, "stream": True, "stream_options": {"include_usage": True}}
    response = httpx.post(
        api_base + "/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=30,
    )
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    final, usage_chunk = json.loads(events[-3]), json.loads(events[-2])
    assert final["choices"] == [{"index": 0, "delta": {}, "finish_reason": "length"}]
    assert final["infrai"]["cost_nanos"] == usage_chunk["infrai"]["cost_nanos"] > 0
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 20
    assert all(json.loads(e)["choices"][0]["finish_reason"] is None for e in events[:-3])


@pytest.mark.parametrize("stream", [False, True])
def test_huge_chunks_claimed_as_ten_tokens_are_billed_at_the_models_cap(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "huge_chunks"  # 10 chunks of 5,000 words, claims 10
    text, infrai = _call(client_for(issue_key(), timeout=60), CHAT, stream=stream)
    words = len(text.split())
    if stream:  # cut after the chunk that passed what 4,096 tokens can be in any tokenizer
        assert words == 5000 * (stream_cut_tokens(TEST_LARGE_OUTPUT_LIMIT) // 5000 + 1)
    else:
        assert words == 50_000
    prompt = _prompt_tokens(CHAT) if stream else 4  # a cut stream never got the vendor's usage
    usage = Usage(input_tokens=prompt, output_tokens=TEST_LARGE_OUTPUT_LIMIT)
    _billed(infrai, usage, UsageSource.CAPPED)


@pytest.mark.parametrize("stream", [False, True])
def test_reported_reasoning_tokens_are_billed_unseen_within_the_cap(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "usage_reasoning"
    fake_catalog["primary"].reasoning_tokens = 300
    text, infrai = _call(client_for(issue_key()), {**CHAT, "max_tokens": 400}, stream=stream)
    assert text == ECHO
    _billed(infrai, Usage(input_tokens=4, output_tokens=5 + 300), UsageSource.VENDOR)


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_past_max_completion_tokens_is_billed_at_the_cap(
    stream, issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "usage_reasoning"
    fake_catalog["primary"].reasoning_tokens = 5000
    body = {**CHAT, "max_completion_tokens": 100}
    text, infrai = _call(client_for(issue_key()), body, stream=stream)
    assert text == ECHO
    _billed(infrai, Usage(input_tokens=4, output_tokens=100), UsageSource.CAPPED)


def test_a_responses_stream_past_max_output_tokens_ends_incomplete(
    issue_key, client_for, fake_catalog
):
    fake_catalog["primary"].fault = "ignores_max_tokens"
    client = client_for(issue_key(), timeout=30)
    events = list(
        client.responses.create(model="test-large", input=PROMPT, max_output_tokens=20, stream=True)
    )
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.usage.output_tokens == 20
    infrai = final.response.model_extra["infrai"]
    request_id = infrai["request_id"]
    log = RequestLog.objects.get(request_id=request_id)
    usage = Usage(input_tokens=log.input_tokens, output_tokens=20)
    cost = assert_billed(request_id, model="test-large", vendor="primary", usage=usage)
    assert infrai["cost_nanos"] == cost > 0
    assert (log.usage_source, log.error_code) == (UsageSource.CAPPED, "vendor_exceeded_output_cap")


def test_responses_bill_zero_usage_by_our_count(issue_key, client_for, fake_catalog):
    fake_catalog["primary"].fault = "usage_zero"
    resp = client_for(issue_key()).responses.create(model="test-large", input=PROMPT)
    assert resp.output_text == ECHO
    assert resp.usage.output_tokens == tokens.count_text(ECHO) and resp.usage.input_tokens > 0
    log = RequestLog.objects.get(request_id=resp.model_extra["infrai"]["request_id"])
    assert log.usage_source == UsageSource.COUNTED


# --- the rule at its edges ---------------------------------------------------------------------
def _relayed(output: int, *, cap: int = 1000, prompt: int = 30, text: int = 20) -> Relayed:
    return Relayed(
        prompt_tokens=prompt, prompt_text_tokens=text, output_tokens=output, output_cap=cap
    )


def _report(prompt: int, output: int, reasoning: int = 0) -> UsageReport:
    return UsageReport(Usage(input_tokens=prompt, output_tokens=output, reasoning_tokens=reasoning))


def test_the_output_band_is_a_factor_either_way_plus_slack():
    count = 300
    low = count // TOKENIZER_RATIO - TOKEN_SLACK
    high = count * TOKENIZER_RATIO + TOKEN_SLACK
    for claimed, source in ((low - 1, "counted"), (low, "vendor"), (high, "vendor"),
                            (high + 1, "counted")):  # fmt: skip
        billed = reconcile(_report(20, claimed), _relayed(count))
        assert billed.source == source
        assert billed.usage.output_tokens == (claimed if source == "vendor" else count)


def test_any_text_delivered_is_at_least_one_token():
    assert reconcile(_report(20, 0), _relayed(2)).usage.output_tokens == 2
    assert reconcile(_report(20, 1), _relayed(2)).source == UsageSource.VENDOR
    assert reconcile(_report(20, 0), _relayed(0)).source == UsageSource.VENDOR


def test_the_output_cap_allows_its_slack_per_choice_and_caps_our_count():
    relayed = Relayed(
        prompt_tokens=30, prompt_text_tokens=20, output_tokens=40, output_cap=40, choices=2
    )
    at_slack = reconcile(_report(20, 40 + 2 * OUTPUT_CAP_SLACK), relayed)
    assert at_slack.source == UsageSource.VENDOR
    past = reconcile(_report(20, 41 + 2 * OUTPUT_CAP_SLACK), relayed)
    assert (past.source, past.usage.output_tokens) == (UsageSource.COUNTED, 40)
    over = reconcile(_report(20, 10), _relayed(500, cap=100))
    assert (over.source, over.usage.output_tokens, over.disputed) == (UsageSource.CAPPED, 100, True)


def test_the_prompt_band_floors_on_the_text_and_ceils_on_the_whole_prompt():
    relayed = _relayed(10, prompt=300, text=60)  # e.g. tool definitions the vendor renders tersely
    assert reconcile(_report(60 // 3 - TOKEN_SLACK, 10), relayed).source == UsageSource.VENDOR
    low = reconcile(_report(60 // 3 - TOKEN_SLACK - 1, 10), relayed)
    assert (low.source, low.usage.input_tokens, low.usage.output_tokens) == ("counted", 300, 10)
    assert reconcile(_report(900 + TOKEN_SLACK, 10), relayed).source == UsageSource.VENDOR
    assert reconcile(_report(901 + TOKEN_SLACK, 10), relayed).usage.input_tokens == 300


def test_reasoning_is_unseen_output_still_capped():
    # visible part 10 of 510 matches what we counted; the 500 hidden tokens are billed
    assert reconcile(_report(20, 510, 500), _relayed(10)).usage.output_tokens == 510
    capped = reconcile(_report(20, 510, 500), _relayed(10, cap=200))
    assert (capped.source, capped.usage.output_tokens) == (UsageSource.CAPPED, 200)
    # the visible part itself implausible: our count plus the reasoning, within the cap
    lied = reconcile(_report(20, 600, 500), _relayed(10))
    assert (lied.source, lied.usage.output_tokens) == (UsageSource.COUNTED, 510)


def test_absent_usage_is_disputed_only_when_text_was_delivered():
    assert reconcile(None, _relayed(5)).disputed is True
    silent = reconcile(None, _relayed(0))
    assert (silent.disputed, silent.source, silent.usage.input_tokens) == (False, "counted", 30)


@pytest.mark.parametrize(
    ("early_prompt", "billed_from_vendor"),
    [
        (7, True),  # plausible for "alpha beta gamma delta" with a chat template: taken
        (10**9, False),  # a vendor claiming a billion-token prompt before it cuts: ignored
        (0, False),  # nothing for a prompt of four words: ignored
    ],
)
def test_a_stream_cut_after_an_early_usage_report_bills_the_prompt_only_when_plausible(
    early_prompt, billed_from_vendor, api_base, issue_key, fake_catalog
):
    """The running report a stream's first chunk may carry (the gpu-backend's, vLLM's) is what
    a broken stream bills its prompt with — only inside the same band a whole answer's usage
    must meet, never a figure the vendor could inflate past the hold or zero out."""
    vendor = fake_catalog["primary"]
    vendor.early_usage = {"prompt_tokens": early_prompt, "completion_tokens": 0}
    vendor.cut_after = 3  # role chunk + two words, then the connection drops
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    response = httpx.post(
        api_base + "/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {issue_key()}"},
        timeout=30,
    )
    request_id = response.headers["x-infrai-request-id"]
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id, cost_nanos__gt=0).exists())
    log = RequestLog.objects.get(request_id=request_id)
    expected_prompt = early_prompt if billed_from_vendor else _prompt_tokens(CHAT)
    assert log.input_tokens == expected_prompt
    assert log.output_tokens == tokens.count_text("Echo: alpha")
    assert audit_findings().findings == []
