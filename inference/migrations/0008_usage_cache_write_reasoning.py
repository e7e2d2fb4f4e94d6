"""The request log's cache-write and reasoning token counts (0 for the rows before)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0007_requestlog_created_brin"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="cache_write_tokens",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="reasoning_tokens",
            field=models.IntegerField(db_default=0, default=0),
        ),
    ]
