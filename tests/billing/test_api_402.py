"""The 402 path end to end: the official OpenAI SDK against the live server.

A small authenticated route opens and settles a hold as the request path does
(``ahold_open``, then ``asettle`` on an event-loop connection) and counts the requests the
server saw. It exists only while a test of this module runs (the ``hold_route``
fixture registers it on a copy of the route table that is put back afterwards), so no other
test can reach it.
"""

from __future__ import annotations

import openai
import pytest

from accounts.models import ApiKey, Project
from billing.services import ahold_open, asettle
from config.asgi import inference_app
from inference.http import ApiRequest, Response, json_response, route
from infra import adb

PATH = "/v1/test-billing/hold"

SEEN: list[str] = []


async def _hold_route(request: ApiRequest) -> Response:
    SEEN.append(request.request_id)
    ctx = request.caller
    await ahold_open(
        organization_id=ctx.organization_id,
        project_id=ctx.project_id,
        api_key_id=ctx.key_id,
        request_id=request.request_id,
        amount_nanos=2_000_000,
        budget_nanos=ctx.monthly_budget_nanos,
        key_budget_nanos=ctx.key_budget_nanos,
    )
    async with adb.connection() as conn:
        settled = await asettle(conn, request_id=request.request_id, actual_nanos=1_000_000)
    assert settled is not None  # the hold above is open: this settlement claims it
    return json_response({"object": "test.hold", "charged_nanos": settled.charged})


@pytest.fixture(autouse=True)
def hold_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test route, on a copy of the route table that monkeypatch restores after the test."""
    monkeypatch.setattr(
        inference_app, "routes", (route(PATH, methods={"POST": _hold_route}), *inference_app.routes)
    )
    SEEN.clear()


def _call(api_base: str, key: str) -> object:
    client = openai.OpenAI(base_url=api_base, api_key=key)  # default max_retries (2)
    return client.post("/test-billing/hold", body={}, cast_to=object)


@pytest.mark.django_db(transaction=True)
def test_empty_wallet_is_402_insufficient_quota_and_never_retried(api_base, issue_key):
    key = issue_key(credit_usd="0")
    SEEN.clear()
    with pytest.raises(openai.APIStatusError) as err:
        _call(api_base, key)
    assert err.value.status_code == 402
    assert err.value.code == "insufficient_quota"
    assert err.value.response.headers["x-should-retry"] == "false"
    assert "available balance is $0" in err.value.message
    assert len(SEEN) == 1


@pytest.mark.parametrize(
    ("budgeted", "code"),
    [
        pytest.param(
            lambda: Project.objects.filter(name="p"), "project_budget_exceeded", id="project"
        ),
        pytest.param(
            lambda: ApiKey.objects.filter(project__name="p"), "key_budget_exceeded", id="key"
        ),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_spent_budget_is_402_with_its_own_code(api_base, issue_key, budgeted, code):
    key = issue_key(org="budgeted", project="p", credit_usd="5")
    budgeted().update(monthly_budget_nanos=1_000_000)
    SEEN.clear()
    with pytest.raises(openai.APIStatusError) as err:
        _call(api_base, key)
    assert err.value.status_code == 402
    assert err.value.code == code
    assert len(SEEN) == 1


@pytest.mark.django_db(transaction=True)
def test_funded_wallet_goes_through(api_base, issue_key):
    key = issue_key(org="funded", credit_usd="1")
    assert _call(api_base, key) == {"object": "test.hold", "charged_nanos": 1_000_000}
