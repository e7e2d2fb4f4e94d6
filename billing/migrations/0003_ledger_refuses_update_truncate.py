"""The ledger refuses every UPDATE, DELETE and TRUNCATE (replaces 0002's narrower trigger).

One trigger function for all three.

- UPDATE: refused unless the only change is a reference set to NULL (``project_id``,
  ``api_key_id``, ``created_by_id``): that is what Django's ``on_delete=SET_NULL`` writes when a
  project, key or user is deleted. Any other column — money, ``kind``, ``request_id``,
  ``external_ref`` (refund attribution), ``description``, a column added later — is refused
  (the row is compared as JSON minus those three references).
- DELETE: refused.
- TRUNCATE: refused unless the role running it owns the table (or is a superuser). The owner
  can disable triggers anyway, so a trigger cannot stop it; the exemption lets Django's test
  runner empty its throw-away database (it uses TRUNCATE). The app's production role must
  neither own the ledger nor hold TRUNCATE on it: see "Database roles" in docs/billing.md.
"""

from django.db import migrations

PG_FORWARD = """
CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID),
                       'MEMBER') THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'billing_ledgerentry is append-only (truncate by %)', current_user;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'billing_ledgerentry is append-only (delete of %)', OLD.id;
    END IF;
    IF (NEW.project_id IS NOT NULL AND NEW.project_id IS DISTINCT FROM OLD.project_id)
       OR (NEW.api_key_id IS NOT NULL AND NEW.api_key_id IS DISTINCT FROM OLD.api_key_id)
       OR (NEW.created_by_id IS NOT NULL AND NEW.created_by_id IS DISTINCT FROM OLD.created_by_id)
       OR (to_jsonb(NEW) - 'project_id' - 'api_key_id' - 'created_by_id')
          IS DISTINCT FROM (to_jsonb(OLD) - 'project_id' - 'api_key_id' - 'created_by_id') THEN
        RAISE EXCEPTION 'billing_ledgerentry is append-only (update of %)', OLD.id;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS billing_ledger_no_truncate ON billing_ledgerentry;
CREATE TRIGGER billing_ledger_no_truncate BEFORE TRUNCATE ON billing_ledgerentry
    FOR EACH STATEMENT EXECUTE FUNCTION billing_ledger_append_only();
"""

# 0002's function (money columns and DELETE only), for the way back.
PG_BACKWARD = """
DROP TRIGGER IF EXISTS billing_ledger_no_truncate ON billing_ledgerentry;
CREATE OR REPLACE FUNCTION billing_ledger_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'billing_ledgerentry is append-only (delete of %)', OLD.id;
    END IF;
    IF NEW.wallet_id IS DISTINCT FROM OLD.wallet_id
       OR NEW.kind IS DISTINCT FROM OLD.kind
       OR NEW.amount_nanos IS DISTINCT FROM OLD.amount_nanos
       OR NEW.balance_after_nanos IS DISTINCT FROM OLD.balance_after_nanos
       OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
       OR NEW.request_id IS DISTINCT FROM OLD.request_id
       OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'billing_ledgerentry is append-only (update of %)', OLD.id;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""

class Migration(migrations.Migration):
    dependencies = [("billing", "0002_ledger_append_only")]

    operations = [migrations.RunSQL(PG_FORWARD, PG_BACKWARD)]
