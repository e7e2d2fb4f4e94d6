from accounts import keys
from accounts.models import ApiKey
from accounts.services import api_key_create, organization_create, project_create


def test_generated_keys_have_prefix_and_valid_checksum():
    raw = keys.generate()
    assert raw.startswith("ifr_")
    assert len(raw) == keys.KEY_LEN
    assert keys.is_well_formed(raw)


def test_a_single_changed_character_breaks_the_checksum():
    raw = keys.generate()
    i = 10
    flipped = raw[:i] + ("A" if raw[i] != "A" else "B") + raw[i + 1 :]
    assert not keys.is_well_formed(flipped)
    assert not keys.is_well_formed(raw[:-1])
    assert not keys.is_well_formed("sk-" + raw[3:])


def test_only_hash_and_last_four_are_stored(db):
    org = organization_create(name="Acme")
    project = project_create(organization=org, name="p")
    api_key, raw = api_key_create(project=project, name="ci")
    row = ApiKey.objects.get(pk=api_key.pk)
    stored = " ".join(str(getattr(row, f.attname)) for f in ApiKey._meta.fields)
    assert raw not in stored
    assert row.key_hash == keys.hash_key(raw) != raw
    assert row.last_four == raw[-4:]
    assert row.display == f"{raw[:8]}…{raw[-4:]}"
