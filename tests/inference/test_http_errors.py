"""Every /v1 failure in the OpenAI shape, raised as the matching exception by the official SDK."""

from __future__ import annotations

from datetime import timedelta

import httpx
import openai
import pytest
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey
from accounts.services import api_key_revoke


def _auth_code(client_for, key):
    with pytest.raises(openai.AuthenticationError) as info:
        client_for(key).models.list()
    assert info.value.status_code == 401
    assert set(info.value.body) == {"message", "type", "code", "param"}
    assert key not in info.value.message
    return info.value.body["code"]


def test_each_key_failure_is_a_401_with_its_own_code(issue_key, client_for, api_base):
    good = issue_key()
    assert client_for(good).models.list().object == "list"
    assert _auth_code(client_for, keys.generate()) == "invalid_api_key"
    assert _auth_code(client_for, "sk-proj-not-ours") == "invalid_api_key"
    r = httpx.get(api_base + "/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    expiring = issue_key()
    ApiKey.objects.filter(key_hash=keys.hash_key(expiring)).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    assert _auth_code(client_for, expiring) == "expired_api_key"
    client_for(good).models.list()  # cached now
    api_key_revoke(api_key=ApiKey.objects.get(key_hash=keys.hash_key(good)))
    assert _auth_code(client_for, good) == "revoked_api_key"


def test_unknown_path_and_wrong_method(issue_key, client_for, api_base):
    client = client_for(issue_key())
    with pytest.raises(openai.NotFoundError) as info:
        client.get("/nope", cast_to=object)
    assert info.value.body["code"] == "unknown_url"
    with pytest.raises(openai.APIStatusError) as info:
        client.delete("/chat/completions", cast_to=object)
    assert info.value.status_code == 405
    assert info.value.body["code"] == "method_not_allowed"
    assert info.value.response.headers["x-infrai-request-id"].startswith("req_")


def test_body_over_the_limit_is_413_through_the_sdk(issue_key, client_for, settings):
    settings.INFRAI_MAX_BODY_BYTES = 1024
    with pytest.raises(openai.APIStatusError) as info:
        client_for(issue_key()).chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "x" * 4096}]
        )
    assert info.value.status_code == 413
    assert info.value.body["code"] == "request_too_large"


def test_errors_never_leak_the_key_or_internals(issue_key, api_base):
    key = issue_key()
    r = httpx.post(
        api_base + "/chat/completions",
        content=b"[1, 2]",
        headers={"authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400
    assert key not in r.text and "Traceback" not in r.text
