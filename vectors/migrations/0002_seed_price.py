"""The vector store's list price: $0.10 per GB-day of storage (OpenAI's vector storage
price), $0.00001 per query ($10 per million searches)."""

import datetime as dt

from django.db import migrations


def seed(apps, schema_editor):
    VectorPrice = apps.get_model("vectors", "VectorPrice")
    VectorPrice.objects.get_or_create(
        effective_from=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        defaults={
            "per_gb_day_nanos": 100_000_000,
            "per_query_nanos": 10_000,
            "source": "infrai list price (vector store)",
        },
    )


class Migration(migrations.Migration):
    dependencies = [("vectors", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
