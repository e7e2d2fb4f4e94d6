"""PostgreSQL: refuse deletes of ledger entries and changes to their money columns.

(References to a project, key or user may still be nulled when those are deleted.)
"""

from django.db import migrations

FORWARD = """
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
CREATE TRIGGER billing_ledger_append_only BEFORE UPDATE OR DELETE ON billing_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledger_append_only();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS billing_ledger_append_only ON billing_ledgerentry;
DROP FUNCTION IF EXISTS billing_ledger_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
