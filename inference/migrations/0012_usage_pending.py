"""The rollup trigger appends to a queue instead of updating the rollups in the call.

Migration 0010's trigger added each log row to its group's rollup row in the settlement's own
statement (``INSERT … ON CONFLICT DO UPDATE``, eight shard rows a group). Concurrent
settlements of one key and model took turns on those rows and every update left a dead
version on the same page (an earlier ``bench/hot_path.py`` run, on a loaded machine, put the
trigger at +0.23 ms of PostgreSQL CPU per call at concurrency 16; quieter runs, +0.1 ms).
Here it appends the row's figures to ``inference_usage_pending`` (no index but its key, no
row another call touches) and ``inference_usage_drain`` moves them into the rollups in bulk,
called by beat every few seconds (:func:`inference.rollups.drain`). Measured with pgbench on the 2-core dev machine,
16 clients inserting log rows of one key and model (PostgreSQL 15): 3,700 rows/s with the
upsert, 6,000 with the append, 8,000 with no trigger; at concurrency 1 through the whole
path (``pg_stat_statements``) the trigger's statements went from 51 to 22 µs a call.

Readers read the view ``inference_usage_daily_live`` (the rollups and the queue, summed by
the reader's ``GROUP BY``), so usage stays exact to the last settled call however late the
drain runs. The drain writes one row per group, so the shards go: their rows are summed into
one.
"""

from importlib import import_module

from django.db import migrations, models

_0011 = import_module("inference.migrations.0011_usage_daily_add_plpgsql")

# What each log row adds to its group (``sign`` -1 takes an old row's figures out again):
# one row appended to the queue. Same signature as migrations 0010/0011, so the apply
# trigger function is unchanged.
ADD = """CREATE OR REPLACE FUNCTION inference_usage_daily_add(r inference_requestlog, sign bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
INSERT INTO inference_usage_pending (
    day, organization_id, project_id, api_key_id, model, vendor, endpoint,
    requests, errors, cache_hits, input_tokens, cached_input_tokens, cache_write_tokens,
    output_tokens, reasoning_tokens, cost_nanos)
VALUES (
    (r.created_at AT TIME ZONE 'UTC')::date, r.organization_id, r.project_id, r.api_key_id,
    r.model, r.vendor, r.endpoint,
    sign, CASE WHEN r.status <> 'ok' THEN sign ELSE 0 END, CASE WHEN r.cache_hit THEN sign ELSE 0 END,
    sign * r.input_tokens, sign * r.cached_input_tokens, sign * r.cache_write_tokens,
    sign * r.output_tokens, sign * r.reasoning_tokens, sign * r.cost_nanos);
END $$;
"""

_GROUP = "day, organization_id, project_id, api_key_id, model, vendor, endpoint"
_SUMS = (
    "requests, errors, cache_hits, input_tokens, cached_input_tokens, cache_write_tokens, "
    "output_tokens, reasoning_tokens, cost_nanos"
)
_SUMMED = ", ".join(f"sum({c}) AS {c}" for c in _SUMS.split(", "))
_KEY = "organization_id, day, project_id, api_key_id, model, vendor, endpoint"
_ADDED = ",\n    ".join(f"{c} = u.{c} + EXCLUDED.{c}" for c in _SUMS.split(", "))

# Up to ``batch`` queued rows (those no other drain holds) moved into the rollups in one
# statement: a row is either still queued or in the rollups, never both or neither, whatever
# commits or rolls back. Returns how many queued rows it moved.
DRAIN = f"""CREATE FUNCTION inference_usage_drain(batch integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    moved bigint;
BEGIN
    WITH taken AS (
        DELETE FROM inference_usage_pending
         WHERE id = ANY(ARRAY(SELECT id FROM inference_usage_pending
                               ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED))
        RETURNING *
    ), summed AS (
        SELECT {_GROUP}, count(*) AS n, {_SUMMED} FROM taken GROUP BY {_GROUP}
    ), written AS (
        INSERT INTO inference_usage_daily AS u ({_GROUP}, {_SUMS})
        SELECT {_GROUP}, {_SUMS} FROM summed
        ON CONFLICT ({_KEY})
        DO UPDATE SET
    {_ADDED}
    )
    SELECT coalesce(sum(n), 0) INTO moved FROM summed;
    RETURN moved;
END $$;
"""

LIVE = f"""CREATE VIEW inference_usage_daily_live AS
SELECT id, {_GROUP}, {_SUMS} FROM inference_usage_daily
UNION ALL
SELECT -id, {_GROUP}, {_SUMS} FROM inference_usage_pending;
"""

# The shards' rows of each group summed into its shard-0 row.
UNSHARD = f"""WITH gone AS (
    DELETE FROM inference_usage_daily WHERE shard <> 0 RETURNING *
)
INSERT INTO inference_usage_daily AS u ({_GROUP}, shard, {_SUMS})
SELECT {_GROUP}, 0, {_SUMMED} FROM gone GROUP BY {_GROUP}
ON CONFLICT ({_KEY}, shard)
DO UPDATE SET
    {_ADDED};
"""

# The group's key without the shard (the state operations say the same to Django).
KEY_WITHOUT_SHARD = [
    "ALTER TABLE inference_usage_daily DROP CONSTRAINT uniq_usage_daily_group;",
    "ALTER TABLE inference_usage_daily DROP COLUMN shard;",
    "ALTER TABLE inference_usage_daily ADD CONSTRAINT uniq_usage_daily_group"
    f" UNIQUE NULLS NOT DISTINCT ({_KEY});",
]
KEY_WITH_SHARD = [
    "ALTER TABLE inference_usage_daily DROP CONSTRAINT uniq_usage_daily_group;",
    "ALTER TABLE inference_usage_daily ADD COLUMN shard smallint NOT NULL DEFAULT 0;",
    "ALTER TABLE inference_usage_daily ALTER COLUMN shard DROP DEFAULT;",
    "ALTER TABLE inference_usage_daily ADD CONSTRAINT uniq_usage_daily_group"
    f" UNIQUE NULLS NOT DISTINCT ({_KEY}, shard);",
]

FORWARD = [ADD, DRAIN, LIVE]
BACKWARD = [
    "DROP VIEW inference_usage_daily_live;",
    "SELECT inference_usage_drain(2147483647);",
    "DROP FUNCTION inference_usage_drain(integer);",
    _0011.PLPGSQL,
]

_FIELDS = [
    ("day", models.DateField()),
    ("organization_id", models.BigIntegerField()),
    ("project_id", models.BigIntegerField(null=True)),
    ("api_key_id", models.BigIntegerField(null=True)),
    ("model", models.CharField(max_length=120)),
    ("vendor", models.CharField(max_length=64)),
    ("endpoint", models.CharField(max_length=40)),
    ("requests", models.BigIntegerField(default=0)),
    ("errors", models.BigIntegerField(default=0)),
    ("cache_hits", models.BigIntegerField(default=0)),
    ("input_tokens", models.BigIntegerField(default=0)),
    ("cached_input_tokens", models.BigIntegerField(default=0)),
    ("cache_write_tokens", models.BigIntegerField(default=0)),
    ("output_tokens", models.BigIntegerField(default=0)),
    ("reasoning_tokens", models.BigIntegerField(default=0)),
    ("cost_nanos", models.BigIntegerField(default=0)),
]


def _id() -> tuple[str, models.BigAutoField]:  # type: ignore[type-arg]
    return (
        "id",
        models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0011_usage_daily_add_plpgsql"),
    ]

    operations = [
        migrations.RunSQL(UNSHARD, reverse_sql=migrations.RunSQL.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="usagedaily", name="uniq_usage_daily_group"
                ),
                migrations.RemoveField(model_name="usagedaily", name="shard"),
                migrations.AddConstraint(
                    model_name="usagedaily",
                    constraint=models.UniqueConstraint(
                        fields=(
                            "organization_id",
                            "day",
                            "project_id",
                            "api_key_id",
                            "model",
                            "vendor",
                            "endpoint",
                        ),
                        name="uniq_usage_daily_group",
                        nulls_distinct=False,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(KEY_WITHOUT_SHARD, reverse_sql=KEY_WITH_SHARD)
            ],
        ),
        migrations.CreateModel(
            name="UsagePending",
            fields=[_id(), *_FIELDS],
            options={"db_table": "inference_usage_pending"},
        ),
        migrations.CreateModel(
            name="UsageDailyLive",
            fields=[_id(), *_FIELDS],
            options={"db_table": "inference_usage_daily_live", "managed": False},
        ),
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
    ]
