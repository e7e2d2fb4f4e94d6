"""A BRIN index on the request log's ``created_at`` for platform-wide time ranges (the
dashboard's model status page), built without blocking the writers (``CONCURRENTLY``)."""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("inference", "0006_requestlog_usage_source"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="requestlog",
            index=django.contrib.postgres.indexes.BrinIndex(
                fields=["created_at"], name="requestlog_created_brin"
            ),
        ),
    ]
