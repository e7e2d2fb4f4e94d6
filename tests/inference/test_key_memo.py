"""A metered route authenticates from the process's remembered key context and confirms it in
the rate-limit round trip (``accounts.auth``, ``inference.limits``): whatever changed about the
key since it was remembered holds on its very next call, on every such route, and a refused
key gets nothing — no answer, no hold, no charge.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from accounts import auth, keys
from accounts.models import ApiKey
from accounts.services import api_key_cache_forget, api_key_limits_set, api_key_revoke
from billing.models import Hold, LedgerEntry
from config.asgi import inference_app
from inference import limits
from inference.models import RequestLog

pytestmark = pytest.mark.usefixtures("gateway_catalog")
HI = [{"role": "user", "content": "hello"}]
UNKNOWN_RESPONSE = "resp_" + "0" * 24


def _unknown_response(call: Callable[[str], Any]) -> None:
    """A call on a stored-response route: a 404 for an unknown id once the key is confirmed
    (what these tests look at is the key's path, not the response)."""
    with contextlib.suppress(openai.NotFoundError):
        call(UNKNOWN_RESPONSE)


# One call on each route registered with confirms_key=True.
METERED: dict[str, Callable[[openai.OpenAI], Any]] = {
    "/v1/chat/completions": lambda c: c.chat.completions.create(model="test-large", messages=HI),
    "/v1/responses": lambda c: c.responses.create(model="test-large", input="hello"),
    "/v1/embeddings": lambda c: c.embeddings.create(model="test-embed", input="hello"),
    "/v1/moderations": lambda c: c.moderations.create(
        model="infrai-gpu/infrai-moderation-minilm", input="hello"
    ),
    "/v1/images/generations": lambda c: c.images.generate(model="test-image", prompt="a cat"),
    "/v1/audio/speech": lambda c: c.audio.speech.create(
        model="piper-en-us-joe", voice="alloy", input="hello", response_format="wav"
    ).read(),
    "/v1/responses/(?P<response_id>[^/]+)": lambda c: _unknown_response(c.responses.retrieve),
    "/v1/responses/(?P<response_id>[^/]+)/input_items": lambda c: _unknown_response(
        c.responses.input_items.list
    ),
    "/v1/responses/(?P<response_id>[^/]+)/cancel": lambda c: _unknown_response(c.responses.cancel),
    "/v1/messages": lambda c: c.post(
        "/messages", body={"model": "test-large", "max_tokens": 16, "messages": HI}, cast_to=object
    ),
    "/v1/messages/count_tokens": lambda c: c.post(
        "/messages/count_tokens", body={"model": "test-large", "messages": HI}, cast_to=object
    ),
}


def test_every_route_that_confirms_in_its_limits_is_covered_here():
    importlib.import_module("inference.routes")  # registers every /v1 route
    confirming = {r.pattern.pattern.strip("^$") for r in inference_app.routes if r.confirms_key}
    assert confirming == set(METERED)


def _key_row(raw: str) -> ApiKey:
    return ApiKey.objects.get(key_hash=keys.hash_key(raw))


def _books(raw: str) -> tuple[int, int]:
    """(holds, ledger entries) of the key."""
    row = _key_row(raw)
    return Hold.objects.filter(api_key_id=row.pk).count(), LedgerEntry.objects.filter(
        api_key_id=row.pk
    ).count()


@pytest.mark.parametrize("path", sorted(METERED))
def test_a_key_revoked_after_it_was_remembered_gets_401_and_nothing_else(
    path, issue_key, client_for
):
    raw = issue_key()
    client = client_for(raw)
    METERED[path](client)  # served: the context is remembered and the cache holds it
    assert keys.hash_key(raw) in auth._memo
    books = _books(raw)
    api_key_revoke(api_key=_key_row(raw))
    with pytest.raises(openai.AuthenticationError) as refused:
        METERED[path](client)
    assert refused.value.body["code"] == "revoked_api_key"
    assert _books(raw) == books
    # Now the remembered context says revoked: refused before the body is even read.
    with pytest.raises(openai.AuthenticationError):
        METERED[path](client)


def test_a_revocation_that_only_reached_the_database_and_the_shared_cache_is_seen(
    issue_key, client_for
):
    """Another process revoked the key: this process never ran the revocation, it only finds
    the shared cache entry gone and the row revoked."""
    raw = issue_key()
    client = client_for(raw)
    client.chat.completions.create(model="test-large", messages=HI)
    remembered = auth._memo[keys.hash_key(raw)]
    ApiKey.objects.filter(key_hash=keys.hash_key(raw)).update(revoked_at="2026-01-01T00:00:00Z")
    api_key_cache_forget(key_hash=keys.hash_key(raw))
    assert auth._memo[keys.hash_key(raw)] is remembered  # this process still remembers it
    with pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(model="test-large", messages=HI)
    assert refused.value.body["code"] == "revoked_api_key"


def test_new_limits_hold_from_the_next_call_both_lower_and_higher(issue_key, client_for):
    raw = issue_key()
    client = client_for(raw)
    client.chat.completions.create(model="test-large", messages=HI, max_tokens=50)
    row = _key_row(raw)
    api_key_limits_set(
        api_key=row, requests_per_minute=1000, tokens_per_minute=30, monthly_budget_nanos=None
    )
    # The remembered context allowed 50 output tokens; the key's current limit does not.
    with pytest.raises(openai.BadRequestError) as never:
        client.chat.completions.create(model="test-large", messages=HI, max_tokens=50)
    assert "30 tokens per minute" in never.value.message
    api_key_limits_set(
        api_key=row, requests_per_minute=1000, tokens_per_minute=100_000, monthly_budget_nanos=None
    )
    raw_resp = client.chat.completions.with_raw_response.create(
        model="test-large", messages=HI, max_tokens=50
    )
    assert raw_resp.headers["x-ratelimit-limit-tokens"] == "100000"


def test_a_refused_call_counts_nothing_against_the_window(issue_key, client_for, monkeypatch):
    """The 400 of a call that can never pass takes back the request it counted."""
    now = time.time()  # one rate-limit window for the whole test
    monkeypatch.setattr(limits, "time", SimpleNamespace(time=lambda: now))
    raw = issue_key()
    client = client_for(raw)
    row = _key_row(raw)
    api_key_limits_set(
        api_key=row, requests_per_minute=2, tokens_per_minute=60, monthly_budget_nanos=None
    )
    for _ in range(3):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="test-large", messages=HI, max_tokens=500)
    for _ in range(2):  # both requests of the minute are still there
        client.chat.completions.create(model="test-large", messages=HI, max_tokens=5)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="test-large", messages=HI, max_tokens=5)


def test_an_unknown_key_is_never_remembered(client_for):
    raw = keys.generate()
    with pytest.raises(openai.AuthenticationError) as refused:
        client_for(raw).chat.completions.create(model="test-large", messages=HI)
    assert refused.value.body["code"] == "invalid_api_key"
    assert keys.hash_key(raw) not in auth._memo
    assert not RequestLog.objects.exists()
