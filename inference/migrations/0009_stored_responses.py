"""Stored Responses API responses (``store``, ``previous_response_id``, background polling)."""

import django.contrib.postgres.indexes
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0008_usage_cache_write_reasoning"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredResponse",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("response_id", models.CharField(max_length=40)),
                ("request_id", models.CharField(max_length=40)),
                ("organization_id", models.BigIntegerField()),
                ("project_id", models.BigIntegerField()),
                ("api_key_id", models.BigIntegerField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("in_progress", "In progress"),
                            ("completed", "Completed"),
                            ("incomplete", "Incomplete"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        max_length=16,
                    ),
                ),
                ("background", models.BooleanField(default=False)),
                ("cancel_requested", models.BooleanField(default=False)),
                ("model", models.CharField(blank=True, max_length=120)),
                ("context", models.JSONField(blank=True, default=list)),
                ("input_items", models.JSONField(blank=True, default=list)),
                ("body", models.JSONField(blank=True, default=dict)),
            ],
            options={
                "indexes": [
                    django.contrib.postgres.indexes.BrinIndex(
                        fields=["created_at"], name="storedresponse_created_brin"
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("response_id",), name="uniq_storedresponse_response"
                    )
                ],
            },
        ),
    ]
