"""Every curl example of docs/management_api.md runs against the live app: JSON, never a 5xx
(but the documented 503 of a top-up without Stripe)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from accounts.models import Role
from accounts.services import (
    api_key_create,
    invitation_create,
    membership_set,
    project_create,
)
from billing.models import EntryKind, LedgerEntry
from billing.services.wallet import wallet_credit
from management.services import admin_key_create
from tests.dashboard.factories import request_log_row
from tests.management.conftest import new_user

DOC = Path(__file__).resolve().parents[2] / "docs" / "management_api.md"


def _commands() -> list[str]:
    out = []
    for block in re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S):
        joined = block.replace("\\\n", " ")
        out += [line.strip() for line in joined.splitlines() if line.strip().startswith("curl")]
    return out


def test_the_documented_curl_examples_run(tenant, base):
    project = project_create(organization=tenant.org, name="docs")
    key, _ = api_key_create(project=project)
    leaver = new_user("leaver")
    membership_set(organization=tenant.org, user=leaver, role=Role.MEMBER)
    invite, _ = invitation_create(
        organization=tenant.org, email="i@example.com", role="member", invited_by=None
    )
    wallet_credit(
        organization=tenant.org, amount_nanos=10**9, kind=EntryKind.CREDIT, idempotency_key="doc"
    )
    entry = LedgerEntry.objects.get(idempotency_key="doc")
    spare, _ = admin_key_create(organization=tenant.org, created_by=tenant.owner)
    log = request_log_row(organization_id=tenant.org.pk)
    ids = {
        "proj_12": f"proj_{project.pk}",
        "key_7": f"key_{key.pk}",
        "user_3": f"user_{leaver.pk}",
        "invite_5": f"invite_{invite.pk}",
        "ledger_9": f"ledger_{entry.pk}",
        "admin_key_2": f"admin_key_{spare.pk}",
        "req_abc123": log.request_id,
    }
    commands = _commands()
    assert len(commands) >= 25
    env = {**os.environ, "BASE": base, "ADMIN_KEY": tenant.key}
    statuses = []
    for command in commands:
        for doc_id, real in ids.items():
            command = re.sub(rf"\b{doc_id}\b", real, command)
        run = subprocess.run(
            command + ' -w "\\n%{http_code}"', shell=True, env=env, capture_output=True, text=True
        )
        body, _, status = run.stdout.rpartition("\n")
        json.loads(body)  # every answer is JSON
        statuses.append((int(status), command))
    server_errors = [(s, c) for s, c in statuses if s >= 500 and "/wallet/topups" not in c]
    assert server_errors == []
    failures = [(s, c) for s, c in statuses if 400 <= s < 500]
    assert all("/projects/proj_" in c and "api_keys" in c for _, c in failures), failures
