"""Schema fuzzing of the management API from the document ``/v1`` serves: zero 5xx.

schemathesis reads ``GET /v1/openapi.json`` from the live app, keeps the management API's
operations (``/organization/…``) and sends, for every one, cases that fit the document and
cases that break it (bounded and reproducible: ``derandomize=True``, a fixed number of cases
per operation and mode). Every answer must be below 500 (but the documented 503 of a top-up on
a server without Stripe) and every error must be in the OpenAI shape.

Two sizes: one case per operation and mode on every run (the default suite: 36 cases in about
25 s), and :data:`FULL_EXAMPLES` per operation and mode when ``INFRAI_FUZZ_MANAGEMENT=1`` is
set (CI nightly: 88 cases in about 40 s; most of it is schemathesis' case generation, not the
server). Last full run: no finding.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
import schemathesis

from management.models import AdminKey
from tests.fuzzing import run_cases

FULL_EXAMPLES = 3
MOUNT = "/organization/"


def _fuzz(tenant: Any, live_url: str, max_examples: int) -> tuple[int, list[tuple[str, int, str]]]:
    """Run the fuzz; returns (cases sent, findings)."""
    AdminKey.objects.filter(organization=tenant.org).update(requests_per_minute=1_000_000)
    served = httpx.get(live_url + "/v1/openapi.json", timeout=30).json()
    served["paths"] = {p: v for p, v in served["paths"].items() if p.startswith(MOUNT)}
    schema = schemathesis.openapi.from_dict(served)
    auth = {"Authorization": f"Bearer {tenant.key}"}
    findings: list[tuple[str, int, str]] = []
    cases = 0

    def check(case: Any) -> None:
        nonlocal cases
        response = case.call(base_url=live_url + "/v1", headers=auth, timeout=30)
        cases += 1
        status = response.status_code
        if status == 503 and case.operation.path == MOUNT + "wallet/topups":
            return
        if status >= 500:
            findings.append((case.operation.label, status, response.text[:300]))
        elif status >= 400:
            body = json.loads(response.content)
            if set(body) != {"error"} or set(body["error"]) != {"message", "type", "code", "param"}:
                findings.append((case.operation.label, status, response.text[:300]))

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            try:
                strategy = operation.as_strategy(generation_mode=mode, headers=auth)
            except Exception:  # nothing to negate
                continue

            run_cases(strategy, check, max_examples=max_examples)
    return cases, findings


def test_one_case_per_operation_and_mode_answers_no_5xx(tenant, live_url):
    cases, findings = _fuzz(tenant, live_url, max_examples=1)
    print(f"management API fuzz (small): {cases} cases")
    assert cases >= 25  # every operation got at least its positive case
    assert findings == []


@pytest.mark.skipif(
    os.environ.get("INFRAI_FUZZ_MANAGEMENT") != "1", reason="set INFRAI_FUZZ_MANAGEMENT=1"
)
def test_no_operation_answers_5xx_or_an_error_outside_the_openai_shape(tenant, live_url):
    cases, findings = _fuzz(tenant, live_url, max_examples=FULL_EXAMPLES)
    print(f"management API fuzz: {cases} cases")
    assert cases > 50
    assert findings == []
