"""A price row's cache-write (5 minutes, 1 hour) and reasoning prices: empty (the catalog's
defaults, ``catalog.selectors.price_snapshot``) for every existing row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0007_vendor_presets"),
    ]

    operations = [
        migrations.AddField(
            model_name="price",
            name="cache_write_5m_per_mtok_nanos",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="price",
            name="cache_write_1h_per_mtok_nanos",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="price",
            name="reasoning_per_mtok_nanos",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
