import io

import pytest
from django.core.management import CommandError, call_command

from accounts import keys
from accounts.models import ApiKey, Organization
from billing.models import LedgerEntry


def run(**kwargs):
    out = io.StringIO()
    call_command("issue_key", stdout=out, **kwargs)
    return out.getvalue().strip().splitlines()


def test_creates_org_project_credit_and_prints_key_last(db):
    lines = run(org="acme", project="web", credit_usd="2.50")
    raw = lines[-1]
    assert keys.is_well_formed(raw)
    api_key = ApiKey.objects.get(key_hash=keys.hash_key(raw))
    assert api_key.project.name == "web"
    org = Organization.objects.get(slug="acme")
    assert org.wallet.balance_nanos == 2_500_000_000
    assert LedgerEntry.objects.filter(wallet=org.wallet).count() == 1


def test_reuses_org_and_project_and_allows_zero_credit(db):
    run(org="acme", project="web", credit_usd="1")
    lines = run(org="acme", project="web", credit_usd="0")
    assert Organization.objects.count() == 1
    org = Organization.objects.get()
    assert org.projects.count() == 1
    assert org.api_keys.count() == 2
    assert org.wallet.balance_nanos == 1_000_000_000
    assert keys.is_well_formed(lines[-1])


def test_rejects_negative_credit(db):
    with pytest.raises(CommandError):
        run(org="acme", project="web", credit_usd="-1")
