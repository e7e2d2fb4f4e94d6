"""Secrets (vendor credentials, customer keys) never reach logs, error bodies or the request log."""

from __future__ import annotations

import logging

import openai
import pytest
from django.core import serializers

from billing.models import LedgerEntry
from inference.models import RequestLog

pytestmark = pytest.mark.usefixtures("fake_catalog")
VENDOR_SECRET = "sk-ant-test-secret"


def test_no_secret_in_logs_bodies_or_the_request_log(issue_key, client_for, fake_catalog, caplog):
    caplog.set_level(logging.DEBUG)
    key = issue_key()
    client = client_for(key)
    ok = client.chat.completions.with_raw_response.create(
        model="claude-fake", messages=[{"role": "user", "content": "hi"}]
    )
    assert fake_catalog["anthro"].requests  # the vendor was called with the secret …
    fake_catalog["anthro"].fail_statuses = [500]
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(
            model="claude-fake", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.AuthenticationError) as bad_key:
        client_for(key[:-2] + "zz").models.list()
    stored = serializers.serialize("json", [*RequestLog.objects.all(), *LedgerEntry.objects.all()])
    for secret in (VENDOR_SECRET, key, key[:-2] + "zz"):
        assert secret not in caplog.text  # … but never logs it
        assert secret not in ok.text and secret not in info.value.response.text
        assert secret not in bad_key.value.response.text
        assert secret not in stored


@pytest.mark.usefixtures("gateway_catalog")  # test-embed on the fakes
def test_the_request_log_keeps_prompts_only_for_organizations_that_opted_in(issue_key, client_for):
    """The prompt (chat messages, embeddings inputs) is in the request-log row only when the
    organization turned ``log_prompts`` on; otherwise the row has none."""
    from accounts.models import Organization

    quiet, keeping = issue_key(org="quiet"), issue_key(org="keeping")
    Organization.objects.filter(slug="keeping").update(log_prompts=True)
    rows = {}
    for name, key in (("quiet", quiet), ("keeping", keeping)):
        client = client_for(key)
        chat = client.chat.completions.create(
            model="test-large", messages=[{"role": "user", "content": f"secret plan of {name}"}]
        )
        embedding = client.embeddings.create(model="test-embed", input=f"embed {name}")
        rows[name] = (
            RequestLog.objects.get(request_id=chat.infrai["request_id"]).prompt,
            RequestLog.objects.get(request_id=embedding.infrai["request_id"]).prompt,
        )
    assert rows["quiet"] == ("", "")
    chat_prompt, embed_prompt = rows["keeping"]
    assert "secret plan of keeping" in chat_prompt
    assert embed_prompt == "embed keeping"
