"""Per-model parameter limits (``ParameterRule.max_value``) and the model's tokenizer, then
the shipped catalog's rows for them (and its corrected ``response_format`` cells) — only the
seed models' matrix cells and tokenizers are written; prices and vendors are left alone."""

from django.db import migrations, models


def load_limits(apps, schema_editor):
    from catalog.documents import SEED_PATH, _cell, read_document

    model_model = apps.get_model("catalog", "Model")
    rule_model = apps.get_model("catalog", "ParameterRule")
    for item in read_document(SEED_PATH).get("models") or []:
        model = model_model.objects.filter(model_id=item["id"]).first()
        if model is None:
            continue
        if item.get("tokenizer"):
            model.tokenizer = item["tokenizer"]
            model.save(update_fields=["tokenizer"])
        for parameter, cell in (item.get("parameters") or {}).items():
            rule_model.objects.update_or_create(
                model=model, parameter=parameter, defaults=_cell(cell, parameter)
            )


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0003_parameter_dimensions'),
    ]

    operations = [
        migrations.AddField(
            model_name='model',
            name='tokenizer',
            field=models.CharField(blank=True, help_text="The tiktoken encoding the model reads token-id input with (cl100k_base for OpenAI's embedding models). Empty: another tokenizer — token-id input in OpenAI's cl100k_base ids is decoded to text before it is sent.", max_length=32),
        ),
        migrations.AddField(
            model_name='parameterrule',
            name='max_value',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(load_limits, migrations.RunPython.noop),
    ]
