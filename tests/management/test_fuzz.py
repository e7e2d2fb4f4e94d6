"""Schema fuzzing of the management API from the document it serves: zero 5xx.

schemathesis reads ``/v1/organization/openapi.json`` from the live app and sends, for every
operation, cases that fit the document and cases that break it (bounded and reproducible:
``derandomize=True``, :data:`MAX_EXAMPLES` per operation and mode). Every answer must be below
500 (but the documented 503 of a top-up on a server without Stripe) and every error must be in
the OpenAI shape.

It takes about a minute and a half (schemathesis' case generation, not the server), more than
the management tests' budget, so it runs when ``INFRAI_FUZZ_MANAGEMENT=1`` is set (CI nightly;
last run: 88 cases, no finding).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from management.models import AdminKey

MAX_EXAMPLES = 3


@pytest.mark.skipif(
    os.environ.get("INFRAI_FUZZ_MANAGEMENT") != "1", reason="set INFRAI_FUZZ_MANAGEMENT=1"
)
def test_no_operation_answers_5xx_or_an_error_outside_the_openai_shape(tenant, base):
    AdminKey.objects.filter(organization=tenant.org).update(requests_per_minute=1_000_000)
    served = httpx.get(base + "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(served)
    auth = {"Authorization": f"Bearer {tenant.key}"}
    findings: list[tuple[str, int, str]] = []
    cases = 0

    def check(case: Any) -> None:
        nonlocal cases
        response = case.call(base_url=base, headers=auth, timeout=30)
        cases += 1
        status = response.status_code
        if status == 503 and case.operation.path == "/wallet/topups":
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

            @settings(
                max_examples=MAX_EXAMPLES,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def one(case: Any) -> None:
                check(case)

            try:
                one()
            except Exception as exc:  # hypothesis: nothing satisfiable for this mode
                if "Unsatisfiable" not in type(exc).__name__:
                    raise
    assert cases > 50
    print(f"management API fuzz: {cases} cases")
    assert findings == []
