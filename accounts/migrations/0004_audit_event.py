"""The audit log (accounts.audit.AuditEvent), append-only on PostgreSQL.

Its trigger refuses every UPDATE but the nulling of ``actor_id`` (what ``on_delete=SET_NULL``
writes when the user is deleted; ``actor_email`` keeps who it was), every DELETE, and a
TRUNCATE by a role that does not own the table (Django's test runner empties its throw-away
database as the owner) — the rule of the ledger (billing migration 0003).
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


PG_FORWARD = """
CREATE OR REPLACE FUNCTION accounts_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID),
                       'MEMBER') THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'accounts_auditevent is append-only (truncate by %)', current_user;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'accounts_auditevent is append-only (delete of %)', OLD.id;
    END IF;
    IF (NEW.actor_id IS NOT NULL AND NEW.actor_id IS DISTINCT FROM OLD.actor_id)
       OR (to_jsonb(NEW) - 'actor_id') IS DISTINCT FROM (to_jsonb(OLD) - 'actor_id') THEN
        RAISE EXCEPTION 'accounts_auditevent is append-only (update of %)', OLD.id;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER accounts_audit_append_only BEFORE UPDATE OR DELETE ON accounts_auditevent
    FOR EACH ROW EXECUTE FUNCTION accounts_audit_append_only();
CREATE TRIGGER accounts_audit_no_truncate BEFORE TRUNCATE ON accounts_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION accounts_audit_append_only();
"""

PG_BACKWARD = """
DROP TRIGGER IF EXISTS accounts_audit_no_truncate ON accounts_auditevent;
DROP TRIGGER IF EXISTS accounts_audit_append_only ON accounts_auditevent;
DROP FUNCTION IF EXISTS accounts_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_apikey_monthly_budget"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("actor_email", models.CharField(blank=True, max_length=254)),
                (
                    "via",
                    models.CharField(
                        choices=[
                            ("dashboard", "Dashboard"),
                            ("api", "Management API"),
                            ("admin", "Staff admin"),
                            ("system", "System"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "credential",
                    models.CharField(
                        blank=True,
                        help_text="The admin key a management call was made with.",
                        max_length=40,
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("key.create", "API key created"),
                            ("key.update", "API key changed"),
                            ("key.revoke", "API key revoked"),
                            ("key.roll", "API key given a new secret"),
                            ("admin_key.create", "Admin key created"),
                            ("admin_key.revoke", "Admin key revoked"),
                            ("member.invite", "Member invited"),
                            ("member.invite_revoke", "Invitation revoked"),
                            ("member.join", "Invitation accepted"),
                            ("member.add", "Member added"),
                            ("member.role", "Role changed"),
                            ("member.remove", "Member removed"),
                            ("project.create", "Project created"),
                            ("project.update", "Project changed"),
                            ("project.archive", "Project archived"),
                            ("project.restore", "Project restored"),
                            ("wallet.auto_recharge", "Auto-recharge settings changed"),
                            ("wallet.card_remove", "Saved card removed"),
                            ("wallet.low_balance", "Low-balance alert changed"),
                        ],
                        max_length=32,
                    ),
                ),
                ("target", models.CharField(max_length=200)),
                ("changes", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.organization",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["organization", "-id"], name="audit_org_id_idx")],
            },
        ),
        migrations.RunSQL(PG_FORWARD, PG_BACKWARD),
    ]
