"""Every call that reaches authentication is in the request log — failures with their status,
code and message — so a customer can see why an integration fails. Unauthenticated calls are
not (there is no tenant to show them to)."""

from __future__ import annotations

import httpx
import pytest

from billing.models import Hold, LedgerEntry
from inference.models import RequestLog, RequestStatus
from tests.live import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "credit", "status", "code"),
    [
        ({"model": "test-large", "messages": USER, "temperature": 9}, "5", 400, "invalid_value"),
        ({"model": "no-such-model", "messages": USER}, "5", 404, "model_not_found"),
        ({"model": "test-large", "messages": USER}, "0", 402, "insufficient_quota"),
        ({"model": "test-large"}, "5", 400, "missing_required_parameter"),
    ],
)
def test_failed_calls_are_in_the_request_log(
    body, credit, status, code, issue_key, api_base, fake_catalog
):
    key = issue_key(credit_usd=credit)
    r = httpx.post(
        api_base + "/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    )
    assert r.status_code == status
    request_id = r.headers["x-request-id"]
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id).exists())
    log = RequestLog.objects.get(request_id=request_id)
    assert (log.http_status, log.error_code) == (status, code)
    assert log.error_message == r.json()["error"]["message"][:500]
    assert log.status == RequestStatus.CLIENT_ERROR and log.cost_nanos == 0
    assert log.endpoint == "chat.completions"
    assert not Hold.objects.exists() and not LedgerEntry.objects.filter(kind="usage").exists()


def test_unauthenticated_calls_are_not_logged(api_base, fake_catalog):
    r = httpx.post(api_base + "/chat/completions", json={"model": "test-large", "messages": USER})
    assert r.status_code == 401
    assert not RequestLog.objects.exists()


def test_a_failure_after_the_hold_is_logged_once_with_its_message(
    issue_key, client_for, fake_catalog
):
    for vendor in ("primary", "backup"):
        fake_catalog[vendor].fail_statuses = [500, 500]
    client = client_for(issue_key())
    with pytest.raises(Exception):  # noqa: B017 - the 502 after failover
        client.chat.completions.create(model="test-large", messages=USER)
    log = RequestLog.objects.get()
    assert (log.http_status, log.error_code) == (502, "vendor_error")
    assert "Every vendor" in log.error_message
