"""The request log partitioned by month of ``created_at``, and its daily usage rollups.

1. ``inference_usage_daily`` (``UsageDaily``).
2. ``inference_requestlog`` becomes a ``PARTITION BY RANGE (created_at)`` parent: the table is
   renamed aside (its secondary indexes dropped, so the copy does not maintain them), a
   partitioned parent made ``LIKE`` it (columns, defaults, identity, checks), one partition
   per month from the oldest row's month to two months ahead plus a default partition, the
   rows copied, then the primary key ``(id, created_at)``, the unique ``(request_id,
   created_at)`` and the old secondary indexes built on the parent (PostgreSQL builds each
   partition's), the id sequence carried on, and the old table dropped. It holds an ACCESS
   EXCLUSIVE lock on the log for the copy: run it with the writers stopped (docs/deploy.md,
   "The request log at scale").
3. The rollup trigger, and the rollups of the rows already there.

Django's state keeps ``id`` as the primary key (ids stay unique: one sequence); only the
unique constraint and the new partial index change in the state.
"""

from django.db import migrations, models

# What each log row adds to its group (``sign`` -1 takes an old row's figures out again).
_ADD_FUNCTION = """CREATE FUNCTION inference_usage_daily_add(r inference_requestlog, sign bigint) RETURNS void
LANGUAGE sql AS $$
INSERT INTO inference_usage_daily AS u (
    day, organization_id, project_id, api_key_id, model, vendor, endpoint, shard,
    requests, errors, cache_hits, input_tokens, cached_input_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, cost_nanos)
VALUES (
    (r.created_at AT TIME ZONE 'UTC')::date, r.organization_id, r.project_id, r.api_key_id,
    r.model, r.vendor, r.endpoint, hashtext(r.request_id) & 7,
    sign, CASE WHEN r.status <> 'ok' THEN sign ELSE 0 END, CASE WHEN r.cache_hit THEN sign ELSE 0 END,
    sign * r.input_tokens, sign * r.cached_input_tokens, sign * r.cache_write_tokens,
    sign * r.output_tokens, sign * r.reasoning_tokens, sign * r.cost_nanos)
ON CONFLICT (organization_id, day, project_id, api_key_id, model, vendor, endpoint, shard)
DO UPDATE SET
    requests = u.requests + EXCLUDED.requests,
    errors = u.errors + EXCLUDED.errors,
    cache_hits = u.cache_hits + EXCLUDED.cache_hits,
    input_tokens = u.input_tokens + EXCLUDED.input_tokens,
    cached_input_tokens = u.cached_input_tokens + EXCLUDED.cached_input_tokens,
    cache_write_tokens = u.cache_write_tokens + EXCLUDED.cache_write_tokens,
    output_tokens = u.output_tokens + EXCLUDED.output_tokens,
    reasoning_tokens = u.reasoning_tokens + EXCLUDED.reasoning_tokens,
    cost_nanos = u.cost_nanos + EXCLUDED.cost_nanos
$$;
"""

_APPLY_FUNCTION = """CREATE FUNCTION inference_usage_daily_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone inference_requestlog;
BEGIN
    -- A call whose id carries no time (made before ids did: inference.request_ids) may have
    -- had its abandoned row written under another created_at, which ON CONFLICT cannot see:
    -- its real row replaces that one here (within a week; ids that carry their time never
    -- need this, and pay only the comparison).
    IF TG_OP = 'INSERT' AND NEW.status <> 'abandoned' AND NEW.created_at IS DISTINCT FROM
       (CASE WHEN NEW.request_id ~ '_[0-9a-f]{24}$' THEN to_timestamp(
           ('x' || substr(NEW.request_id, length(NEW.request_id) - 23, 12))::bit(48)::bigint
           / 1000.0) END)
    THEN
        FOR gone IN
            DELETE FROM inference_requestlog
             WHERE request_id = NEW.request_id AND status = 'abandoned'
               AND created_at <> NEW.created_at
               AND created_at > NEW.created_at - interval '7 days'
               AND created_at < NEW.created_at + interval '1 day'
            RETURNING *
        LOOP
            PERFORM inference_usage_daily_add(gone, -1);
        END LOOP;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF (OLD.organization_id, OLD.project_id, OLD.api_key_id, OLD.model, OLD.vendor,
            OLD.endpoint, OLD.status, OLD.cache_hit, OLD.input_tokens, OLD.cached_input_tokens,
            OLD.cache_write_tokens, OLD.output_tokens, OLD.reasoning_tokens, OLD.cost_nanos)
           IS NOT DISTINCT FROM
           (NEW.organization_id, NEW.project_id, NEW.api_key_id, NEW.model, NEW.vendor,
            NEW.endpoint, NEW.status, NEW.cache_hit, NEW.input_tokens, NEW.cached_input_tokens,
            NEW.cache_write_tokens, NEW.output_tokens, NEW.reasoning_tokens, NEW.cost_nanos)
        THEN
            RETURN NULL;
        END IF;
        PERFORM inference_usage_daily_add(OLD, -1);
    END IF;
    PERFORM inference_usage_daily_add(NEW, 1);
    RETURN NULL;
END $$;
"""

_TRIGGERS = """-- created_at is never updated (it is the call's arrival, carried by its request id), so a row
-- never moves between partitions; an update that touches no usage column fires nothing.
CREATE TRIGGER inference_usage_daily_insert AFTER INSERT ON inference_requestlog
    FOR EACH ROW EXECUTE FUNCTION inference_usage_daily_apply();
CREATE TRIGGER inference_usage_daily_update AFTER UPDATE OF
    organization_id, project_id, api_key_id, model, vendor, endpoint, status, cache_hit,
    input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
    cost_nanos
    ON inference_requestlog FOR EACH ROW EXECUTE FUNCTION inference_usage_daily_apply();
"""

_BACKFILL = """INSERT INTO inference_usage_daily (
    day, organization_id, project_id, api_key_id, model, vendor, endpoint, shard,
    requests, errors, cache_hits, input_tokens, cached_input_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, cost_nanos)
SELECT (created_at AT TIME ZONE 'UTC')::date, organization_id, project_id, api_key_id, model,
       vendor, endpoint, hashtext(request_id) & 7,
       count(*), count(*) FILTER (WHERE status <> 'ok'), count(*) FILTER (WHERE cache_hit),
       sum(input_tokens), sum(cached_input_tokens), sum(cache_write_tokens),
       sum(output_tokens), sum(reasoning_tokens), sum(cost_nanos)
FROM inference_requestlog
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
"""

# Separate statements: Django would split one script at semicolons, the functions' too.
USAGE_ADD = [_ADD_FUNCTION, _APPLY_FUNCTION, _TRIGGERS, _BACKFILL]

USAGE_DROP = """
DROP TRIGGER inference_usage_daily_update ON inference_requestlog;
DROP TRIGGER inference_usage_daily_insert ON inference_requestlog;
DROP FUNCTION inference_usage_daily_apply();
DROP FUNCTION inference_usage_daily_add(inference_requestlog, bigint);
"""

PARTITION = """
DO $$
DECLARE
    defs text[];
    def text;
    idx record;
    first_month date;
    last_month date;
    m date;
    seq text;
    old_seq text;
    last_id bigint;
    called boolean;
BEGIN
    LOCK TABLE inference_requestlog IN ACCESS EXCLUSIVE MODE;
    SELECT coalesce(array_agg(indexdef), '{}') INTO defs FROM pg_indexes
     WHERE schemaname = current_schema() AND tablename = 'inference_requestlog'
       AND indexname NOT IN ('inference_requestlog_pkey', 'uniq_requestlog_request');
    old_seq := pg_get_serial_sequence('inference_requestlog', 'id');
    EXECUTE format('SELECT last_value, is_called FROM %s', old_seq) INTO last_id, called;

    ALTER TABLE inference_requestlog RENAME TO inference_requestlog_old;
    ALTER TABLE inference_requestlog_old DROP CONSTRAINT uniq_requestlog_request;
    ALTER TABLE inference_requestlog_old
        RENAME CONSTRAINT inference_requestlog_pkey TO inference_requestlog_old_pkey;
    FOR idx IN SELECT indexname FROM pg_indexes
                WHERE schemaname = current_schema() AND tablename = 'inference_requestlog_old'
                  AND indexname <> 'inference_requestlog_old_pkey' LOOP
        EXECUTE format('DROP INDEX %I', idx.indexname);
    END LOOP;

    CREATE TABLE inference_requestlog (LIKE inference_requestlog_old
        INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS INCLUDING GENERATED
        INCLUDING STORAGE) PARTITION BY RANGE (created_at);
    SELECT date_trunc('month', coalesce(min(created_at), now()) AT TIME ZONE 'UTC')::date
      INTO first_month FROM inference_requestlog_old;
    last_month := (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '2 months')::date;
    m := first_month;
    WHILE m <= last_month LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF inference_requestlog FOR VALUES FROM (%L) TO (%L)',
            'inference_requestlog_p' || to_char(m, 'YYYYMM'),
            (m::timestamp AT TIME ZONE 'UTC'),
            ((m + interval '1 month')::timestamp AT TIME ZONE 'UTC'));
        m := (m + interval '1 month')::date;
    END LOOP;
    CREATE TABLE inference_requestlog_default PARTITION OF inference_requestlog DEFAULT;

    INSERT INTO inference_requestlog OVERRIDING SYSTEM VALUE
        SELECT * FROM inference_requestlog_old;

    ALTER TABLE inference_requestlog
        ADD CONSTRAINT inference_requestlog_pkey PRIMARY KEY (id, created_at);
    ALTER TABLE inference_requestlog
        ADD CONSTRAINT uniq_requestlog_request_created UNIQUE (request_id, created_at);
    FOREACH def IN ARRAY defs LOOP
        EXECUTE def;
    END LOOP;
    CREATE INDEX requestlog_prompt_kept ON inference_requestlog (created_at)
        WHERE NOT (prompt = '');

    DROP TABLE inference_requestlog_old;
    seq := pg_get_serial_sequence('inference_requestlog', 'id');
    EXECUTE format('ALTER SEQUENCE %s RENAME TO inference_requestlog_id_seq', seq);
    PERFORM setval('inference_requestlog_id_seq', last_id, called);
END $$;
"""

# Back to one plain table (the rows of every partition kept).
UNPARTITION = """
DO $$
DECLARE
    last_id bigint;
    called boolean;
BEGIN
    LOCK TABLE inference_requestlog IN ACCESS EXCLUSIVE MODE;
    SELECT last_value, is_called INTO last_id, called FROM inference_requestlog_id_seq;
    ALTER TABLE inference_requestlog RENAME TO inference_requestlog_old;
    ALTER TABLE inference_requestlog_old
        RENAME CONSTRAINT inference_requestlog_pkey TO inference_requestlog_old_pkey;
    CREATE TABLE inference_requestlog (LIKE inference_requestlog_old
        INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS INCLUDING GENERATED
        INCLUDING STORAGE);
    INSERT INTO inference_requestlog OVERRIDING SYSTEM VALUE
        SELECT * FROM inference_requestlog_old;
    DROP TABLE inference_requestlog_old;
    EXECUTE format('ALTER SEQUENCE %s RENAME TO inference_requestlog_id_seq',
                   pg_get_serial_sequence('inference_requestlog', 'id'));
    PERFORM setval('inference_requestlog_id_seq', last_id, called);
    ALTER TABLE inference_requestlog ADD CONSTRAINT inference_requestlog_pkey PRIMARY KEY (id);
    ALTER TABLE inference_requestlog
        ADD CONSTRAINT uniq_requestlog_request UNIQUE (request_id);
    CREATE INDEX inference_r_organiz_115fce_idx
        ON inference_requestlog (organization_id, created_at DESC);
    CREATE INDEX inference_r_organiz_9a5496_idx
        ON inference_requestlog (organization_id, model, created_at DESC);
    CREATE INDEX inference_r_organiz_1d2122_idx
        ON inference_requestlog (organization_id, project_id, created_at DESC);
    CREATE INDEX requestlog_created_brin ON inference_requestlog USING brin (created_at);
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0009_stored_responses"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageDaily",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("organization_id", models.BigIntegerField()),
                ("project_id", models.BigIntegerField(null=True)),
                ("api_key_id", models.BigIntegerField(null=True)),
                ("model", models.CharField(max_length=120)),
                ("vendor", models.CharField(max_length=64)),
                ("endpoint", models.CharField(max_length=40)),
                ("shard", models.SmallIntegerField()),
                ("requests", models.BigIntegerField(default=0)),
                ("errors", models.BigIntegerField(default=0)),
                ("cache_hits", models.BigIntegerField(default=0)),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("cached_input_tokens", models.BigIntegerField(default=0)),
                ("cache_write_tokens", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("reasoning_tokens", models.BigIntegerField(default=0)),
                ("cost_nanos", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "inference_usage_daily",
                "constraints": [
                    models.UniqueConstraint(
                        fields=(
                            "organization_id",
                            "day",
                            "project_id",
                            "api_key_id",
                            "model",
                            "vendor",
                            "endpoint",
                            "shard",
                        ),
                        name="uniq_usage_daily_group",
                        nulls_distinct=False,
                    )
                ],
            },
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="requestlog", name="uniq_requestlog_request"
                ),
                migrations.AddIndex(
                    model_name="requestlog",
                    index=models.Index(
                        condition=models.Q(("prompt", ""), _negated=True),
                        fields=["created_at"],
                        name="requestlog_prompt_kept",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="requestlog",
                    constraint=models.UniqueConstraint(
                        fields=("request_id", "created_at"),
                        name="uniq_requestlog_request_created",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(PARTITION, reverse_sql=UNPARTITION)],
        ),
        migrations.RunSQL(USAGE_ADD, reverse_sql=USAGE_DROP),
    ]
