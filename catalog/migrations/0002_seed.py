"""Load the shipped catalog (catalog/seed/catalog.yaml) — idempotent; deletes nothing."""

from django.db import migrations


def load_seed(apps, schema_editor):
    from catalog.documents import SEED_PATH, catalog_load, read_document

    catalog_load(read_document(SEED_PATH), apps=apps)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0001_initial")]

    operations = [migrations.RunPython(load_seed, migrations.RunPython.noop)]
