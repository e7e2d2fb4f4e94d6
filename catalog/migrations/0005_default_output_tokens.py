"""A model's default output limit (``Model.default_output_tokens``): what a request that sets no
``max_tokens`` gets, sent to the vendor and held for — then the shipped catalog's values for the
seed models (the local chat model's 512)."""

from django.db import migrations, models


def load_defaults(apps, schema_editor):
    from catalog.documents import SEED_PATH, read_document

    model_model = apps.get_model("catalog", "Model")
    for item in read_document(SEED_PATH).get("models") or []:
        if item.get("default_output_tokens"):
            model_model.objects.filter(model_id=item["id"]).update(
                default_output_tokens=item["default_output_tokens"]
            )


class Migration(migrations.Migration):

    dependencies = [
        ("catalog", "0004_limits_and_tokenizer"),
    ]

    operations = [
        migrations.AddField(
            model_name="model",
            name="default_output_tokens",
            field=models.PositiveIntegerField(
                default=0,
                help_text="Output tokens a request that sets no max_tokens gets (sent to the "
                "vendor and held for). 0: the vendor's own default, held at the output limit.",
            ),
        ),
        migrations.RunPython(load_defaults, migrations.RunPython.noop),
    ]
