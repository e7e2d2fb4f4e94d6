"""The wallet's low-balance alert: its threshold (default USD 1) and whether it is armed."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_hold_process_checkpoint")]

    operations = [
        migrations.AddField(
            model_name="wallet",
            name="low_balance_threshold_nanos",
            field=models.BigIntegerField(db_default=1_000_000_000, default=1_000_000_000),
        ),
        migrations.AddField(
            model_name="wallet",
            name="low_balance_armed",
            field=models.BooleanField(db_default=True, default=True),
        ),
    ]
