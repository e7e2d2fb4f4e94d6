"""The Batch API driven by the official ``openai`` SDK against the live app and fake vendors,
with its money on PostgreSQL: the whole batch reserved at submission, each line settled once
at the batch price under its own request id, a cancel releasing exactly what was not spent,
and the books clean after each."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from batches import runner
from batches.models import Batch
from billing.audit import audit_findings
from billing.models import Hold, HoldStatus, LedgerEntry, Wallet
from catalog.documents import catalog_load
from catalog.models import Offering
from inference.models import RequestLog
from money.pricing import Usage, cost_nanos, discounted
from money.usd import nanos_to_usd_str
from tests.inference.conftest import image_and_embedding_models, offering_price

CHAT_URL = "/v1/chat/completions"


def chat_line(custom_id: str, text: str, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT_URL,
        "body": {
            "model": "test-large",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 50,
            **body,
        },
    }


def upload(client: openai.OpenAI, lines: list[dict[str, Any]]) -> str:
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.create(file=("batch.jsonl", io.BytesIO(content)), purpose="batch").id


def wallet() -> Wallet:
    return Wallet.objects.get(organization__slug="acme")


def assert_books_clean() -> None:
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []


def line_charge(request_id: str, *, percent: int) -> int:
    """What the line of ``request_id`` should cost: its logged usage at the batch price of
    the offering that served it."""
    row = RequestLog.objects.get(request_id=request_id)
    price = discounted(offering_price(row.model, row.vendor), percent=percent)
    usage = Usage(
        input_tokens=row.input_tokens,
        cached_input_tokens=row.cached_input_tokens,
        output_tokens=row.output_tokens,
    )
    return cost_nanos(price=price, usage=usage)


def output_lines(client: openai.OpenAI, file_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_batch_reserves_its_worst_case_and_settles_each_line_at_the_batch_price(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    Offering.objects.filter(model__model_id="test-large").update(batch_discount_percent=25)
    client = client_for(issue_key())
    lines = [chat_line(f"req-{i}", f"tell me {i} things") for i in range(3)]
    file_id = upload(client, lines)
    start = wallet().balance_nanos

    batch = client.batches.create(
        input_file_id=file_id, endpoint=CHAT_URL, completion_window="24h", metadata={"k": "v"}
    )

    assert batch.status == "validating" and batch.request_counts.total == 3
    assert batch.metadata == {"k": "v"}
    hold = Hold.objects.get(request_id=batch.id)
    assert hold.status == HoldStatus.OPEN and hold.amount_nanos > 0
    assert wallet().held_nanos == hold.amount_nanos  # the whole batch, one hold
    assert Batch.objects.get(public_id=batch.id).reserved_nanos == hold.amount_nanos

    assert runner.run_sync(batch.id) == 3

    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.completed_at and done.in_progress_at
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 0)
    assert done.output_file_id and done.error_file_id is None
    out = output_lines(client, done.output_file_id)
    assert [o["custom_id"] for o in out] == ["req-0", "req-1", "req-2"]
    charged = 0
    for o in out:
        response = o["response"]
        assert o["error"] is None and o["id"].startswith("batch_req_")
        assert response["status_code"] == 200
        assert response["body"]["object"] == "chat.completion"
        assert response["body"]["choices"][0]["message"]["content"]
        rid = response["request_id"]
        expected = line_charge(rid, percent=25)
        assert expected > 0
        assert [e.amount_nanos for e in LedgerEntry.objects.filter(request_id=rid)] == [-expected]
        assert response["body"]["infrai"]["cost_usd"] == pytest.approx(expected / 1e9)
        charged += expected
    released = Hold.objects.get(request_id=batch.id)
    assert released.status == HoldStatus.SETTLED and released.captured_nanos == 0
    assert not LedgerEntry.objects.filter(request_id=batch.id).exists()
    assert wallet().balance_nanos == start - charged
    assert done.model_extra and done.model_extra["infrai"]["cost_usd"] == nanos_to_usd_str(charged)
    # The batch object's usage (OpenAI's shape) is the sum of what its lines logged.
    rows = RequestLog.objects.filter(request_id__in=[o["response"]["request_id"] for o in out])
    assert done.usage is not None
    assert done.usage.input_tokens == sum(r.input_tokens for r in rows) > 0
    assert done.usage.output_tokens == sum(r.output_tokens for r in rows) > 0
    assert done.usage.input_tokens_details.cached_tokens == sum(r.cached_input_tokens for r in rows)
    assert done.usage.output_tokens_details.reasoning_tokens == sum(
        r.reasoning_tokens for r in rows
    )
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert_books_clean()


def test_a_bad_line_is_a_400_naming_it_with_nothing_stored_or_held(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    start = wallet().balance_nanos
    cases = [
        (chat_line("b", "hi", temperature="hot"), "line[2].body.temperature"),
        (chat_line("b", "hi", model="test-quirky", logit_bias={"1": 1}), "line[2].body"),
        (chat_line("a", "hi"), "line[2].custom_id"),
        ({**chat_line("b", "hi"), "url": "/v1/embeddings"}, "line[2].url"),
        (chat_line("b", "hi", model="no-such-model"), "line[2].body"),
    ]
    for bad, param in cases:
        file_id = upload(client, [chat_line("a", "hello"), bad])
        with pytest.raises(openai.APIStatusError) as refused:
            client.batches.create(input_file_id=file_id, endpoint=CHAT_URL, completion_window="24h")
        error = refused.value.body
        assert isinstance(error, dict)
        assert refused.value.status_code in (400, 404), error
        assert error["param"].startswith(param), error
        assert error["message"].startswith("Line 2 of the input file"), error
    assert not Batch.objects.exists()
    assert not Hold.objects.filter(request_id__startswith="batch_").exists()
    assert wallet().balance_nanos == start
    assert_books_clean()


def test_an_underfunded_wallet_is_a_402_saying_what_fits_and_holds_nothing(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key(credit_usd="0.01"))
    # Each line may cost a little over $0.004 at the batch price (4,000 output tokens at $1/1M).
    lines = [chat_line(f"r{i}", "hello", max_tokens=4000) for i in range(4)]
    file_id = upload(client, lines)
    start = wallet().balance_nanos

    with pytest.raises(openai.APIStatusError) as refused:
        client.batches.create(input_file_id=file_id, endpoint=CHAT_URL, completion_window="24h")

    assert refused.value.status_code == 402
    assert refused.value.response.headers["x-should-retry"] == "false"
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "insufficient_quota"
    assert "covers the first 2 of them" in error["message"], error["message"]
    assert not Batch.objects.exists()
    assert not Hold.objects.filter(request_id__startswith="batch_").exists()
    assert wallet().balance_nanos == start and wallet().held_nanos == 0
    assert_books_clean()


def test_a_batch_cancelled_halfway_releases_exactly_what_was_not_spent(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line(f"c{i}", f"say {i}") for i in range(4)])
    start = wallet().balance_nanos
    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT_URL, completion_window="24h")

    assert runner.run_sync(batch.id, limit=2) == 2
    halfway = client.batches.retrieve(batch.id)
    assert halfway.status == "in_progress" and halfway.request_counts.completed == 2
    cancelled = client.batches.cancel(batch.id)

    assert cancelled.status == "cancelled" and cancelled.cancelled_at and cancelled.cancelling_at
    assert runner.run_sync(batch.id) == 0  # nothing more runs
    answered = output_lines(client, cancelled.output_file_id or "")
    skipped = output_lines(client, cancelled.error_file_id or "")
    assert [o["custom_id"] for o in answered] == ["c0", "c1"]
    assert [(o["custom_id"], o["response"], o["error"]["code"]) for o in skipped] == [
        ("c2", None, "batch_cancelled"),
        ("c3", None, "batch_cancelled"),
    ]
    spent = sum(
        -e.amount_nanos
        for o in answered
        for e in LedgerEntry.objects.filter(request_id=o["response"]["request_id"])
    )
    assert spent == sum(line_charge(o["response"]["request_id"], percent=50) for o in answered)
    assert spent > 0
    assert wallet().balance_nanos == start - spent and wallet().held_nanos == 0
    assert Hold.objects.get(request_id=batch.id).captured_nanos == 0
    with pytest.raises(openai.BadRequestError):
        client.batches.cancel(batch.id)
    assert_books_clean()


def test_a_failing_line_goes_to_the_error_file_and_costs_nothing(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line("ok", "hello"), chat_line("down", "hello again")])
    batch = client.batches.create(input_file_id=file_id, endpoint=CHAT_URL, completion_window="24h")
    start = wallet().balance_nanos
    assert runner.run_sync(batch.id, limit=1) == 1
    for name in ("primary", "backup"):
        fake_catalog[name].fail_statuses = [500]

    runner.run_sync(batch.id)

    done = client.batches.retrieve(batch.id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 1)
    [failed] = output_lines(client, done.error_file_id or "")
    assert failed["custom_id"] == "down" and failed["error"] is None
    assert failed["response"]["status_code"] == 502
    assert failed["response"]["body"]["error"]["type"]
    rid = failed["response"]["request_id"]
    assert RequestLog.objects.get(request_id=rid).http_status == 502
    assert not LedgerEntry.objects.filter(request_id=rid).exists()
    [ok] = output_lines(client, done.output_file_id or "")
    spent = -LedgerEntry.objects.get(request_id=ok["response"]["request_id"]).amount_nanos
    assert wallet().balance_nanos == start - spent
    assert_books_clean()


def test_an_embeddings_batch(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    catalog_load({"vendors": [], "models": image_and_embedding_models()})
    client = client_for(issue_key())
    lines = [
        {
            "custom_id": f"e{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "test-embed", "input": f"text number {i}"},
        }
        for i in range(2)
    ]
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/embeddings", completion_window="24h"
    )
    runner.run_sync(batch.id)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.request_counts.completed == 2
    out = output_lines(client, done.output_file_id or "")
    assert [o["custom_id"] for o in out] == ["e0", "e1"]
    for o in out:
        body = o["response"]["body"]
        assert body["object"] == "list" and len(body["data"][0]["embedding"]) == 8
        rid = o["response"]["request_id"]
        expected = line_charge(rid, percent=50)
        assert [e.amount_nanos for e in LedgerEntry.objects.filter(request_id=rid)] == (
            [-expected] if expected else []
        )
    assert_books_clean()


def test_batches_are_listed_newest_first_by_cursor(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    made = [
        client.batches.create(
            input_file_id=upload(client, [chat_line("x", "hi")]),
            endpoint=CHAT_URL,
            completion_window="24h",
        ).id
        for _ in range(3)
    ]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == [made[2], made[1]] and first.has_more
    rest = client.batches.list(limit=2, after=made[1])
    assert [b.id for b in rest.data] == [made[0]] and not rest.has_more
    assert [b.id for b in client.batches.list()] == made[::-1]  # the SDK pages on its own
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    for batch_id in made:
        client.batches.cancel(batch_id)
    assert_books_clean()


def test_a_batch_of_an_unsupported_endpoint_or_window_is_a_400(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line("x", "hi")])
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(
            input_file_id=file_id, endpoint="/v1/completions", completion_window="24h"
        )
    assert refused.value.body["param"] == "endpoint"  # type: ignore[index]
    assigned = client.files.create(file=("a.txt", io.BytesIO(b"text")), purpose="assistants")
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(input_file_id=assigned.id, endpoint=CHAT_URL, completion_window="24h")
    assert refused.value.body["param"] == "input_file_id"  # type: ignore[index]
    assert not Batch.objects.exists()


def test_lines_and_metadata_carrying_nul_characters_run_and_settle(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    """PostgreSQL's jsonb refuses a NUL character: a batch whose lines (and answers) carry one
    is stored with U+FFFD in its place, never a 500 with the reservation left open."""
    client = client_for(issue_key())
    batch = client.batches.create(
        input_file_id=upload(client, [chat_line("nul-id", "say \x00 this")]),
        endpoint=CHAT_URL,
        completion_window="24h",
        metadata={"k\x00": "v\x00"},
    )
    assert runner.run_sync(batch.id) == 1
    done = client.batches.retrieve(batch.id)
    assert done.metadata == {"k\ufffd": "v\ufffd"}
    assert done.status == "completed" and done.request_counts.completed == 1
    [out] = output_lines(client, done.output_file_id)
    assert out["custom_id"] == "nul-id" and out["response"]["status_code"] == 200
    # A custom_id, the caller's key to its answers, is refused rather than altered.
    with pytest.raises(openai.BadRequestError) as refused:
        client.batches.create(
            input_file_id=upload(client, [chat_line("nul\x00id", "x")]),
            endpoint=CHAT_URL,
            completion_window="24h",
        )
    assert refused.value.body["param"] == "line[1].custom_id"
    assert_books_clean()
