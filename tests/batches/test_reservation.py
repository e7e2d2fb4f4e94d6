"""The money under the Batch API: carving a line's hold out of the batch's reservation, the
batch price, and a batch whose completion window ends releasing exactly what was not spent."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from batches import runner, services, tasks
from batches.models import Batch
from billing.errors import InsufficientFunds
from billing.models import Hold, HoldStatus, LedgerEntry, Wallet
from billing.services import ahold_carve, hold_open, hold_settle
from infra import adb
from money.pricing import PriceSnapshot, Usage, cost_nanos, discounted
from tests.batches.test_batches import assert_books_clean, chat_line, output_lines, upload


def test_the_batch_price_lowers_every_rate_rounding_up() -> None:
    price = PriceSnapshot(
        price_id=7,
        input_per_mtok_nanos=1_000_000_001,
        output_per_mtok_nanos=3,
        per_image_nanos={"*": 10},
    )
    half = discounted(price, percent=50)
    assert half.price_id == 7
    assert (half.input_per_mtok_nanos, half.output_per_mtok_nanos) == (500_000_001, 2)
    assert half.per_image_nanos == {"*": 5}
    assert discounted(price, percent=0) == price
    assert cost_nanos(price=discounted(price, percent=100), usage=Usage(output_tokens=9)) == 0
    with pytest.raises(ValueError):
        discounted(price, percent=101)


def _carve(parent: str, rid: str, amount: int) -> None:
    async def go() -> None:
        try:
            await ahold_carve(parent_request_id=parent, request_id=rid, amount_nanos=amount)
        finally:
            await adb.close()

    asyncio.run(go())


def test_a_carved_hold_moves_reserved_money_and_never_more_than_is_left(
    transactional_db: None, issue_key: Callable[..., str]
) -> None:
    issue_key()
    wallet = Wallet.objects.get(organization__slug="acme")
    hold_open(
        organization_id=wallet.organization_id,
        project_id=None,
        api_key_id=None,
        request_id="batch_parent",
        amount_nanos=1000,
    )
    _carve("batch_parent", "req_line1", 600)
    wallet.refresh_from_db()
    assert wallet.held_nanos == 1000  # still reserved, now under two holds
    assert Hold.objects.get(request_id="batch_parent").amount_nanos == 400
    assert Hold.objects.get(request_id="req_line1").amount_nanos == 600

    with pytest.raises(InsufficientFunds) as refused:
        _carve("batch_parent", "req_line2", 401)
    assert refused.value.available_nanos == 400
    assert not Hold.objects.filter(request_id="req_line2").exists()

    assert hold_settle(request_id="req_line1", actual_nanos=250) == 250
    assert hold_settle(request_id="batch_parent", actual_nanos=0) == 0
    with pytest.raises(InsufficientFunds) as closed:
        _carve("batch_parent", "req_line3", 1)
    assert closed.value.available_nanos == 0
    wallet.refresh_from_db()
    assert wallet.held_nanos == 0
    assert [e.amount_nanos for e in LedgerEntry.objects.filter(kind="usage")] == [-250]


def test_a_batch_past_its_window_expires_and_releases_what_was_not_spent(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line(f"x{i}", f"word {i}") for i in range(3)])
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                  completion_window="24h")  # fmt: skip
    start = Wallet.objects.get(organization__slug="acme").balance_nanos

    runner.run_sync(batch.id, limit=1)
    Batch.objects.filter(public_id=batch.id).update(
        expires_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    )

    tasks.batch_sweep()

    expired = client.batches.retrieve(batch.id)
    assert expired.status == "expired" and expired.expired_at
    assert expired.request_counts.completed == 1
    codes = [o["error"]["code"] for o in output_lines(client, expired.error_file_id or "")]
    assert codes == ["batch_expired", "batch_expired"]
    [done] = output_lines(client, expired.output_file_id or "")
    spent = -LedgerEntry.objects.get(request_id=done["response"]["request_id"]).amount_nanos
    wallet = Wallet.objects.get(organization__slug="acme")
    assert wallet.balance_nanos == start - spent and wallet.held_nanos == 0
    assert Hold.objects.get(request_id=batch.id).status == HoldStatus.SETTLED
    assert_books_clean()


def test_the_sweep_runs_a_batch_no_worker_started(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    lines = [chat_line("only", "hello")]
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/chat/completions",
        completion_window="24h",
    )  # fmt: skip
    assert tasks.batch_sweep() == 1
    assert client.batches.retrieve(batch.id).status == "completed"
    assert tasks.batch_sweep() == 0
    assert json.loads(
        client.files.content(client.batches.retrieve(batch.id).output_file_id or "").text
    )
    assert_books_clean()


def test_a_line_whose_worker_died_mid_call_is_never_run_twice(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line("lost", "one"), chat_line("next", "two")])
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                  completion_window="24h")  # fmt: skip
    # A worker started the first line (its ids are saved) and died before recording it.
    started = services.line_next(batch_id=Batch.objects.get(public_id=batch.id).pk)
    assert started is not None and started.custom_id == "lost"
    Batch.objects.filter(public_id=batch.id).update(lease_until=None)  # its lease ran out

    runner.run_sync(batch.id)

    done = client.batches.retrieve(batch.id)
    assert (done.status, done.request_counts.completed, done.request_counts.failed) == (
        "completed",
        1,
        1,
    )
    [lost] = output_lines(client, done.error_file_id or "")
    assert lost["custom_id"] == "lost" and lost["error"]["code"] == "batch_worker_lost"
    assert started.request_id in lost["error"]["message"]
    assert not LedgerEntry.objects.filter(request_id=started.request_id).exists()
    assert [o["custom_id"] for o in output_lines(client, done.output_file_id or "")] == ["next"]
    assert_books_clean()


def test_a_cancel_while_a_worker_runs_the_batch_is_ended_by_that_worker(
    fake_catalog: Any, issue_key: Callable[..., str], client_for: Callable[..., openai.OpenAI]
) -> None:
    client = client_for(issue_key())
    file_id = upload(client, [chat_line(f"w{i}", "hello") for i in range(3)])
    batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions",
                                  completion_window="24h")  # fmt: skip
    start = Wallet.objects.get(organization__slug="acme").balance_nanos
    leased = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    Batch.objects.filter(public_id=batch.id).update(lease_until=leased)  # a worker holds it

    assert client.batches.cancel(batch.id).status == "cancelling"
    assert Hold.objects.get(request_id=batch.id).status == HoldStatus.OPEN
    Batch.objects.filter(public_id=batch.id).update(lease_until=None)  # that worker moves on
    assert runner.run_sync(batch.id) == 0

    cancelled = client.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled" and cancelled.output_file_id is None
    assert len(output_lines(client, cancelled.error_file_id or "")) == 3
    wallet = Wallet.objects.get(organization__slug="acme")
    assert wallet.balance_nanos == start and wallet.held_nanos == 0
    assert_books_clean()
