"""The vendor presets (Azure OpenAI, Gemini, Bedrock and the OpenAI-compatible hosts) and what
they serve, from the shipped catalog (catalog/seed/catalog.yaml): adds what the database lacks
and changes nothing staff may have edited.

- A preset vendor the database lacks is created from the seed row.
- A preset vendor it has keeps every field, except that a still-empty ``parameter_rules`` /
  ``api_version`` gets the seed's value: migration 0002 loads the seed with the historical
  model, which has no such columns, so on a fresh database this is where they are filled.
- A model, offering, price or matrix cell is added only when absent (a model's cells and an
  offering's prices only for a model / offering this migration creates).
"""

from django.db import migrations

PRESET_VENDORS = (
    "azure",
    "gemini",
    "bedrock",
    "groq",
    "together",
    "fireworks",
    "mistral",
    "xai",
    "openrouter",
    "ollama",
    "vllm",
    "sglang",
)
_VENDOR_COLUMNS = (
    "display_name",
    "adapter_kind",
    "base_url",
    "base_url_setting",
    "credentials_env",
    "region",
    "api_version",
    "parameter_rules",
    "enabled",
    "notes",
)
_FILLED_WHEN_EMPTY = ("parameter_rules", "api_version")


def _add_vendors(apps, document):
    vendor_model = apps.get_model("catalog", "Vendor")
    for item in document.get("vendors") or []:
        if item["name"] not in PRESET_VENDORS:
            continue
        values = {k: item[k] for k in _VENDOR_COLUMNS if item.get(k) is not None}
        vendor = vendor_model.objects.filter(name=item["name"]).first()
        if vendor is None:
            vendor_model.objects.create(name=item["name"], **values)
            continue
        empty = [k for k in _FILLED_WHEN_EMPTY if k in values and not getattr(vendor, k)]
        for name in empty:
            setattr(vendor, name, values[name])
        if empty:
            vendor.save(update_fields=empty)


def _model_values(model_model, item):
    """The columns of seed entry ``item`` that the historical ``model_model`` has."""
    from catalog.documents import _fields, _moment
    from catalog.models import MODEL_FIELDS

    values = {k: item[k] for k in MODEL_FIELDS if k in item}
    if "created" in item:
        values["created_at"] = _moment(item["created"], f"model {item['id']}")
    return _fields(model_model, values)


def _add_model(apps, item):
    """The model of seed entry ``item``, created (with its matrix cells) when absent."""
    from catalog.documents import _cell

    model_model = apps.get_model("catalog", "Model")
    rule_model = apps.get_model("catalog", "ParameterRule")
    model = model_model.objects.filter(model_id=item["id"]).first()
    if model is not None:
        return model
    model = model_model.objects.create(model_id=item["id"], **_model_values(model_model, item))
    for parameter, cell in (item.get("parameters") or {}).items():
        rule_model.objects.create(model=model, parameter=parameter, **_cell(cell, parameter))
    return model


def _add_offering(apps, model, spec):
    """``spec``'s offering of ``model`` (on a preset vendor), created with its prices when
    absent."""
    from catalog.documents import _moment, _usd_nanos
    from catalog.models import USD_PRICES

    vendor = apps.get_model("catalog", "Vendor").objects.get(name=spec["vendor"])
    offering_model = apps.get_model("catalog", "Offering")
    if offering_model.objects.filter(vendor=vendor, model=model).exists():
        return
    offering = offering_model.objects.create(
        vendor=vendor,
        model=model,
        upstream_model=spec.get("upstream_model") or model.model_id,
        priority=int(spec.get("priority", 100)),
        enabled=bool(spec.get("enabled", True)),
    )
    price_model = apps.get_model("catalog", "Price")
    for price in spec.get("prices") or []:
        # Only the prices this historical model has (later migrations add columns).
        columns = {f.name for f in price_model._meta.get_fields()}
        amounts = {
            p.column: _usd_nanos(price.get(p.name, "0"), p.name)
            for p in USD_PRICES
            if p.column in columns
        }
        price_model.objects.create(
            offering=offering,
            effective_from=_moment(price["effective_from"], "effective_from"),
            source=str(price["source"]),
            per_image_nanos={
                str(size): _usd_nanos(usd, size)
                for size, usd in (price.get("per_image_usd") or {}).items()
            },
            **amounts,
        )


def add_presets(apps, schema_editor):
    from catalog.documents import SEED_PATH, read_document

    document = read_document(SEED_PATH)
    _add_vendors(apps, document)
    models = {item["id"]: item for item in document.get("models") or []}
    for item in models.values():
        for spec in item.get("offerings") or []:
            if spec["vendor"] in PRESET_VENDORS:
                _add_offering(apps, _add_model(apps, item), spec)
    for spec in document.get("offerings") or []:
        if spec["vendor"] in PRESET_VENDORS:
            _add_offering(apps, _add_model(apps, models[spec["model"]]), spec)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0006_vendor_api_version_and_rules")]

    operations = [migrations.RunPython(add_presets, migrations.RunPython.noop)]
