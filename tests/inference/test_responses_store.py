"""Stored and background Responses end to end: the official SDK → live app → fake chat vendors,
with the stored rows, the ledger and the money audit on PostgreSQL."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import httpx
import openai
import pytest
from django.utils import timezone

from accounts.models import Organization
from billing.audit import audit_findings
from billing.models import Hold, HoldStatus, LedgerEntry
from catalog.documents import catalog_load
from inference.models import RequestLog, RequestStatus, StoredResponse
from inference.tasks import expire_stored_responses
from money.pricing import Usage
from tests.catalog_docs import catalog_model, offering
from tests.inference.conftest import CHEAP_PRICE, assert_billed
from tests.live import wait_for

pytestmark = pytest.mark.usefixtures("fake_catalog")


@pytest.fixture
def keeping_key(issue_key):
    """``keeping_key(project=…)``: a key of an organization with the platform's default
    retention (and, unlike the default, one that logs prompts: stored responses do not depend
    on it)."""

    def issue(project: str = "default") -> str:
        key = issue_key(org="keeping", project=project)
        Organization.objects.filter(slug="keeping").update(log_prompts=True)
        return key

    return issue


def assert_books_clean() -> None:
    assert not Hold.objects.filter(status=HoldStatus.OPEN).exists()
    assert audit_findings().findings == []


def _usage(resp) -> Usage:
    return Usage(input_tokens=resp.usage.input_tokens, output_tokens=resp.usage.output_tokens)


def test_previous_response_id_works_on_the_very_next_call(keeping_key, client_for, fake_catalog):
    client = client_for(keeping_key())
    first = client.responses.create(model="test-large", input="alpha beta", store=True)
    assert first.store is True and first.status == "completed"
    second = client.responses.create(
        model="test-large", previous_response_id=first.id, input="gamma"
    )
    assert second.previous_response_id == first.id and second.output_text == "Echo: gamma"
    sent = fake_catalog["primary"].requests[-1]["messages"]
    assert sent == [
        {"role": "user", "content": [{"type": "text", "text": "alpha beta"}]},
        {"role": "assistant", "content": "Echo: alpha beta"},
        {"role": "user", "content": "gamma"},
    ]
    # the replayed turn is input, charged as such
    assert second.usage.input_tokens > first.usage.input_tokens
    infrai = second.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"], model="test-large", vendor="primary", usage=_usage(second)
    )
    assert cost == infrai["cost_nanos"] > 0
    third = client.responses.create(
        model="test-large", previous_response_id=second.id, input="delta"
    )
    texts = [m["content"] for m in fake_catalog["primary"].requests[-1]["messages"]]
    assert texts[1:4] == ["Echo: alpha beta", [{"type": "text", "text": "gamma"}], "Echo: gamma"]
    assert third.output_text == "Echo: delta"
    # A chained response's input items are the conversation it continued, then its own input
    # (newest first by default), each with an id, as OpenAI lists them.
    items = client.responses.input_items.list(third.id).data
    assert [(i.role, [c.text for c in i.content]) for i in items] == [
        ("user", ["delta"]),
        ("assistant", ["Echo: gamma"]),
        ("user", ["gamma"]),
        ("assistant", ["Echo: alpha beta"]),
        ("user", ["alpha beta"]),
    ]
    assert len({i.id for i in items}) == 5
    oldest = client.responses.input_items.list(third.id, order="asc", limit=2)
    assert [i.id for i in oldest.data] == [i.id for i in items[::-1][:2]] and oldest.has_more
    assert_books_clean()


def test_a_conversation_continues_on_another_model(keeping_key, client_for, fake_catalog):
    catalog_load(
        {
            "models": [
                catalog_model(
                    "test-other",
                    quality_tier=4,
                    capabilities=["chat", "responses"],
                    offerings=[offering("primary", "up-small", CHEAP_PRICE)],
                )
            ]
        }
    )
    client = client_for(keeping_key())
    first = client.responses.create(model="test-large", input="one two")
    second = client.responses.create(model="test-other", previous_response_id=first.id, input="x")
    sent = fake_catalog["primary"].requests[-1]
    assert sent["model"] == "up-small" and second.model == "test-other"
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"] == "Echo: one two"


def test_a_streamed_response_is_stored_before_its_last_event(keeping_key, client_for, fake_catalog):
    client = client_for(keeping_key())
    events = list(client.responses.create(model="test-large", input="red green", stream=True))
    final = events[-1].response
    assert final.store is True and final.status == "completed"
    # the very next call finds it
    resp = client.responses.create(model="test-large", previous_response_id=final.id, input="blue")
    assert fake_catalog["primary"].requests[-1]["messages"][1]["content"] == "Echo: red green"
    assert resp.output_text == "Echo: blue"


def test_retrieve_input_items_and_delete(keeping_key, client_for):
    client = client_for(keeping_key())
    created = client.responses.create(
        model="test-large",
        instructions="Be brief.",
        input=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    )
    got = client.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == "Echo: second" == created.output_text
    assert got.instructions == "Be brief." and got.model_extra["infrai"]["cost_nanos"] > 0
    items = client.responses.input_items.list(created.id)
    assert [i.role for i in items.data] == ["user", "assistant", "user"]  # newest first
    assert items.data[0].content[0].text == "second" and items.has_more is False
    asc = client.responses.input_items.list(created.id, order="asc", limit=1)
    assert asc.data[0].content[0].text == "first" and asc.has_more is True
    rest = client.responses.input_items.list(created.id, order="asc", after=asc.last_id)
    assert [i.role for i in rest.data] == ["assistant", "user"]
    deleted = client.responses.delete(created.id)
    assert deleted is None  # the SDK returns nothing; the body is checked below
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve(created.id)
    assert caught.value.body["param"] == "response_id"
    assert not StoredResponse.objects.exists()


def test_delete_answers_openais_shape(keeping_key, client_for, api_base):
    key = keeping_key()
    created = client_for(key).responses.create(model="test-large", input="hi")
    answer = httpx.delete(
        f"{api_base}/responses/{created.id}", headers={"authorization": f"Bearer {key}"}
    )
    assert answer.json() == {"id": created.id, "object": "response", "deleted": True}


def test_another_projects_key_sees_no_response(keeping_key, client_for, fake_catalog):
    mine = client_for(keeping_key())
    theirs = client_for(keeping_key(project="other"))
    created = mine.responses.create(model="test-large", input="secret words")
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(created.id)
    holds = Hold.objects.count()
    requests = len(fake_catalog["primary"].requests)
    with pytest.raises(openai.NotFoundError) as caught:
        theirs.responses.create(model="test-large", previous_response_id=created.id, input="x")
    assert caught.value.body["param"] == "previous_response_id"
    assert Hold.objects.count() == holds and len(fake_catalog["primary"].requests) == requests
    assert mine.responses.retrieve(created.id).output_text == "Echo: secret words"


def test_an_organization_that_logs_no_prompts_still_keeps_its_responses(issue_key, client_for):
    client = client_for(issue_key())  # log_prompts off, retention the platform's default
    first = client.responses.create(model="test-large", input="remember me")
    assert first.store is True
    follow = client.responses.create(model="test-large", previous_response_id=first.id, input="x")
    assert follow.previous_response_id == first.id
    assert StoredResponse.objects.count() == 2


def test_zero_retention_stores_nothing_and_refuses_the_chain(issue_key, client_for):
    key = issue_key(org="forgetful")
    Organization.objects.filter(slug="forgetful").update(response_retention_days=0)
    client = client_for(key)
    resp = client.responses.create(model="test-large", input="hi", store=True)
    assert resp.store is False and not StoredResponse.objects.exists()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="test-large", previous_response_id=resp.id, input="x")
    error = caught.value.body
    assert error["param"] == "previous_response_id" and error["code"] == "zero_retention"
    assert "keeps no stored responses" in error["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="test-large", input="x", background=True)
    assert caught.value.body["param"] == "background"
    assert Hold.objects.count() == 1  # the first call's only


def test_store_false_is_not_kept(keeping_key, client_for):
    client = client_for(keeping_key())
    resp = client.responses.create(model="test-large", input="hi", store=False)
    assert resp.store is False and not StoredResponse.objects.exists()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_a_background_response_is_polled_to_completion(keeping_key, client_for, fake_catalog):
    client = client_for(keeping_key())
    queued = client.responses.create(model="test-large", input="one two three", background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    done = wait_for(lambda: (r := client.responses.retrieve(queued.id)).status == "completed" and r)
    assert done.output_text == "Echo: one two three" and done.usage.output_tokens == 4
    infrai = done.model_extra["infrai"]
    cost = assert_billed(
        infrai["request_id"], model="test-large", vendor="primary", usage=_usage(done)
    )
    assert cost == infrai["cost_nanos"] > 0
    follow = client.responses.create(model="test-large", previous_response_id=done.id, input="x")
    assert fake_catalog["primary"].requests[-1]["messages"][1]["content"] == done.output_text
    assert follow.status == "completed"
    assert_books_clean()


def test_a_background_response_cancelled_mid_generation_pays_for_what_it_generated(
    keeping_key, client_for, fake_catalog
):
    vendor = fake_catalog["primary"]
    vendor.chunk_delay_s = 0.2
    client = client_for(keeping_key())
    words = " ".join(f"w{i}" for i in range(40))
    queued = client.responses.create(model="test-large", input=words, background=True)
    wait_for(lambda: vendor.chunks_sent >= 4)
    with pytest.raises(openai.BadRequestError) as caught:  # not before it has ended
        client.responses.create(model="test-large", previous_response_id=queued.id, input="x")
    assert caught.value.body["param"] == "previous_response_id"
    hold = Hold.objects.get(request_id=_rid(queued.id))  # taken at submission
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled" and cancelled.id == queued.id
    assert vendor.stream_closed.wait(10) and vendor.chunks_sent < 20
    log = RequestLog.objects.get(request_id=hold.request_id)
    assert log.status == RequestStatus.CANCELLED and 0 < log.output_tokens < 41
    assert 0 < log.cost_nanos < Hold.objects.get(pk=hold.pk).amount_nanos
    assert LedgerEntry.objects.get(request_id=hold.request_id).amount_nanos == -log.cost_nanos
    assert cancelled.model_extra["infrai"]["cost_nanos"] == log.cost_nanos
    assert cancelled.usage.output_tokens == log.output_tokens
    assert cancelled.output_text and cancelled.output_text.startswith("Echo:")
    assert client.responses.retrieve(queued.id).status == "cancelled"
    assert client.responses.cancel(queued.id).status == "cancelled"  # idempotent
    assert_books_clean()


def _rid(response_id: str) -> str:
    return "req_" + response_id.removeprefix("resp_")


def test_only_background_responses_can_be_cancelled(keeping_key, client_for):
    client = client_for(keeping_key())
    resp = client.responses.create(model="test-large", input="hi")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.cancel(resp.id)
    assert caught.value.body["message"] == "Only background responses can be cancelled."
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")


def test_background_needs_store(keeping_key, client_for):
    client = client_for(keeping_key())
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="test-large", input="x", background=True, store=False)
    assert caught.value.body["param"] == "store"
    assert not Hold.objects.exists() and not StoredResponse.objects.exists()


def test_a_background_stream_is_replayed_from_any_sequence_number(
    keeping_key, client_for, fake_catalog
):
    fake_catalog["primary"].chunk_delay_s = 0.05
    client = client_for(keeping_key())
    events = list(
        client.responses.create(
            model="test-large", input="one two three", background=True, stream=True
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    final = events[-1].response
    assert final.output_text == "Echo: one two three" and final.background is True
    again = list(client.responses.retrieve(final.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in again] == list(range(4, len(events)))
    assert [e.type for e in again] == [e.type for e in events[4:]]
    assert client.responses.retrieve(final.id).status == "completed"
    infrai = final.model_extra["infrai"]
    assert LedgerEntry.objects.get(request_id=infrai["request_id"]).amount_nanos == (
        -infrai["cost_nanos"]
    )
    assert_books_clean()


def test_only_background_responses_are_streamed_again(keeping_key, client_for):
    client = client_for(keeping_key())
    resp = client.responses.create(model="test-large", input="hi")
    with pytest.raises(openai.BadRequestError) as caught:
        list(client.responses.retrieve(resp.id, stream=True))
    assert caught.value.body["param"] == "stream"


def test_stored_responses_past_retention_are_deleted(keeping_key, client_for, settings):
    client = client_for(keeping_key())
    old = client.responses.create(model="test-large", input="old")
    new = client.responses.create(model="test-large", input="new")
    StoredResponse.objects.filter(response_id=old.id).update(
        created_at=timezone.now() - dt.timedelta(days=settings.INFRAI_RESPONSES_RETENTION_DAYS + 1)
    )
    with pytest.raises(openai.NotFoundError):  # past retention: gone before the sweep too
        client.responses.retrieve(old.id)
    assert expire_stored_responses() == (1, 0)
    assert list(StoredResponse.objects.values_list("response_id", flat=True)) == [new.id]


def test_the_docs_example_runs_verbatim(keeping_key, api_base, monkeypatch, capsys):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = doc.split("## Stored and background responses", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("INFRAI_BASE_URL", api_base)
    monkeypatch.setenv("INFRAI_API_KEY", keeping_key())
    exec(compile(example, "docs/api.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("Echo: And another one?")
    assert printed[1] == "['message', 'message', 'message']"  # the chain it continued, its input
    assert printed[2] == "completed Echo: Write a limerick."
    assert StoredResponse.objects.count() == 2  # the first one deleted
    assert_books_clean()


def test_a_cancel_made_through_another_process_stops_the_generation(
    keeping_key, client_for, fake_catalog
):
    vendor = fake_catalog["primary"]
    vendor.chunk_delay_s = 0.2
    client = client_for(keeping_key())
    words = " ".join(f"w{i}" for i in range(40))
    queued = client.responses.create(model="test-large", input=words, background=True)
    wait_for(lambda: vendor.chunks_sent >= 3)
    # What POST …/cancel on another web process writes: this one sees it within a poll.
    StoredResponse.objects.filter(response_id=queued.id).update(cancel_requested=True)
    done = wait_for(lambda: (r := client.responses.retrieve(queued.id)).status == "cancelled" and r)
    assert vendor.stream_closed.wait(10) and vendor.chunks_sent < 30
    log = RequestLog.objects.get(request_id=_rid(queued.id))
    assert log.status == RequestStatus.CANCELLED and log.cost_nanos > 0
    assert done.model_extra["infrai"]["cost_nanos"] == log.cost_nanos
    assert LedgerEntry.objects.get(request_id=log.request_id).amount_nanos == -log.cost_nanos
    assert_books_clean()


def test_a_background_response_no_vendor_can_serve_fails_free(
    keeping_key, client_for, fake_catalog
):
    fake_catalog["primary"].fail_statuses = [500]
    fake_catalog["backup"].fail_statuses = [500]
    client = client_for(keeping_key())
    queued = client.responses.create(model="test-large", input="hi", background=True)
    failed = wait_for(lambda: (r := client.responses.retrieve(queued.id)).status == "failed" and r)
    assert failed.error.code == "vendor_error" and failed.output == []
    assert failed.model_extra["infrai"]["cost_nanos"] == 0
    assert not LedgerEntry.objects.filter(request_id=_rid(queued.id)).exists()
    assert Hold.objects.get(request_id=_rid(queued.id)).status != HoldStatus.OPEN
    assert_books_clean()


def test_a_background_stream_the_vendor_breaks_fails_billed_for_what_it_delivered(
    keeping_key, client_for, fake_catalog
):
    fake_catalog["primary"].cut_after = 4
    client = client_for(keeping_key())
    queued = client.responses.create(
        model="test-large", input="one two three four five six", background=True
    )
    failed = wait_for(lambda: (r := client.responses.retrieve(queued.id)).status == "failed" and r)
    assert failed.error.code == "server_error"
    assert "Echo: one two three".startswith(failed.output_text)  # what arrived before the cut
    log = RequestLog.objects.get(request_id=_rid(queued.id))
    assert log.status == RequestStatus.VENDOR_ERROR and log.cost_nanos > 0
    assert failed.model_extra["infrai"]["cost_nanos"] == log.cost_nanos
    assert LedgerEntry.objects.get(request_id=log.request_id).amount_nanos == -log.cost_nanos
    assert_books_clean()
