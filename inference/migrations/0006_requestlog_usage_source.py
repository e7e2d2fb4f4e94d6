from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inference", "0005_request_status_unavailable"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="usage_source",
            field=models.CharField(
                choices=[
                    ("vendor", "Vendor's usage"),
                    ("counted", "Our count of what was relayed"),
                    ("capped", "Capped at the output cap"),
                ],
                db_default="vendor",
                default="vendor",
                max_length=8,
            ),
        ),
    ]
