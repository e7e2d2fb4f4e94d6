import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0008_cache_write_reasoning_prices"),
    ]

    operations = [
        migrations.AddField(
            model_name="offering",
            name="batch_discount_percent",
            field=models.PositiveSmallIntegerField(
                default=50,
                help_text="The Batch API's discount on this offering's price, in percent (0-100).",
                validators=[django.core.validators.MaxValueValidator(100)],
            ),
        ),
    ]
