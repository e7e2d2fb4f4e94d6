"""The ledger is append-only in the database itself (migration 0003): no UPDATE of any content
column, no DELETE, no TRUNCATE by a role that does not own the table."""

from __future__ import annotations

import secrets

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.backends.utils import CursorWrapper

from accounts.services import project_create
from billing.models import EntryKind, LedgerEntry
from billing.services import hold_settle
from tests.billing.conftest import USD, open_hold

pytestmark = pytest.mark.django_db


@pytest.fixture
def entry(make_tenant) -> LedgerEntry:
    t = make_tenant(balance_nanos=10 * USD)
    open_hold(t, "req_a", USD)
    hold_settle(request_id="req_a", actual_nanos=USD)
    return LedgerEntry.objects.get(kind=EntryKind.USAGE)


@pytest.mark.parametrize(
    "change",
    [
        {"amount_nanos": 0},
        {"balance_after_nanos": 0},
        {"kind": EntryKind.CREDIT},
        {"request_id": "other"},
        {"external_ref": "ch_stolen"},  # refund attribution
        {"description": "edited"},
        {"idempotency_key": "usage:other"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_update_of_any_content_column_is_refused(entry, change):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).update(**change)
    entry.refresh_from_db()
    assert (entry.amount_nanos, entry.description, entry.external_ref) == (-USD, "", "")


def test_references_may_only_be_set_to_null(entry):
    """What Django's SET_NULL writes when a project, key or user is deleted still works."""
    other = project_create(organization=entry.wallet.organization, name="other")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).update(project=other)
    assert LedgerEntry.objects.filter(pk=entry.pk).update(project=None, api_key=None) == 1
    entry.refresh_from_db()
    assert (entry.project_id, entry.api_key_id, entry.amount_nanos) == (None, None, -USD)


def test_deleting_a_key_and_its_project_nulls_their_attribution(entry):
    """Holds and ledger entries name their project and key without a database constraint
    (none is checked on the call path); deleting either through Django still nulls the
    reference, and the money stays."""
    from accounts.models import ApiKey, Project
    from billing.models import Hold

    hold = Hold.objects.get(request_id="req_a")
    assert (entry.project_id, entry.api_key_id) == (hold.project_id, hold.api_key_id)
    assert entry.api_key_id is not None and entry.project_id is not None
    ApiKey.objects.filter(pk=entry.api_key_id).delete()
    Project.objects.filter(pk=entry.project_id).delete()
    entry.refresh_from_db()
    hold.refresh_from_db()
    assert (entry.project_id, entry.api_key_id, entry.amount_nanos) == (None, None, -USD)
    assert (hold.project_id, hold.api_key_id, hold.captured_nanos) == (None, None, USD)


def test_delete_is_refused(entry):
    # SQLite: Django's test runner empties tables with DELETE, so no trigger refuses it there.
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).delete()
    assert LedgerEntry.objects.filter(pk=entry.pk).exists()


def _new_role(cur: CursorWrapper) -> str:
    """A new NOLOGIN, non-superuser role, rolled back with the test transaction. The deferred FK
    checks of the rows inserted so far run first: PostgreSQL refuses a TRUNCATE of a table with
    pending trigger events whatever our trigger says."""
    role = f"infrai_test_app_{secrets.token_hex(4)}"
    cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
    cur.execute(f"CREATE ROLE {role} NOLOGIN NOSUPERUSER")
    return role


def test_truncate_is_refused_to_a_role_that_does_not_own_the_ledger(entry):
    """Even with the TRUNCATE privilege granted (e.g. a careless ``GRANT ALL``)."""
    with connection.cursor() as cur:
        role = _new_role(cur)
        cur.execute(f"GRANT TRUNCATE, SELECT ON billing_ledgerentry TO {role}")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            cur.execute(f"SET LOCAL ROLE {role}")
            cur.execute("TRUNCATE billing_ledgerentry")
        cur.execute("RESET ROLE")
    assert LedgerEntry.objects.filter(pk=entry.pk).exists()
    # The owner (here the test superuser) may: it could disable the trigger anyway, and the
    # test runner empties its throw-away database this way.
    with transaction.atomic():
        sid = transaction.savepoint()
        with connection.cursor() as cur:
            cur.execute("TRUNCATE billing_ledgerentry")
        assert not LedgerEntry.objects.exists()
        transaction.savepoint_rollback(sid)
    assert LedgerEntry.objects.filter(pk=entry.pk).exists()
    with connection.cursor() as cur:
        cur.execute("SET CONSTRAINTS ALL DEFERRED")


def test_the_documented_app_role_grants_append_and_reference_nulling_only(entry):
    """docs/billing.md's GRANTs, applied to a fresh non-superuser role, do what they say."""
    with connection.cursor() as cur:
        role = _new_role(cur)
        cur.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        cur.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cur.execute(f"REVOKE UPDATE, DELETE, TRUNCATE ON billing_ledgerentry FROM {role}")
        cur.execute(
            f"GRANT UPDATE (project_id, api_key_id, created_by_id) ON billing_ledgerentry TO {role}"
        )

        def as_app(sql: str, params: list[object] | None = None) -> None:
            with transaction.atomic():
                cur.execute(f"SET LOCAL ROLE {role}")
                cur.execute(sql, params)

        as_app(
            "INSERT INTO billing_ledgerentry (wallet_id, kind, amount_nanos, balance_after_nanos,"
            " idempotency_key, request_id, external_ref, description, created_at)"
            " VALUES (%s, 'credit', 1, 1, 'role-test', '', '', '', now())",
            [entry.wallet_id],
        )
        as_app("UPDATE billing_ledgerentry SET project_id = NULL WHERE id = %s", [entry.pk])
        for sql in (
            "UPDATE billing_ledgerentry SET description = 'x' WHERE id = %s",
            "DELETE FROM billing_ledgerentry WHERE id = %s",
        ):
            with pytest.raises(DatabaseError, match="permission denied"):
                as_app(sql, [entry.pk])
        with pytest.raises(DatabaseError, match="permission denied"):
            as_app("TRUNCATE billing_ledgerentry")
        cur.execute("RESET ROLE")
        cur.execute("SET CONSTRAINTS ALL DEFERRED")
    assert LedgerEntry.objects.filter(idempotency_key="role-test").exists()
    entry.refresh_from_db()
    assert (entry.project_id, entry.description) == (None, "")
