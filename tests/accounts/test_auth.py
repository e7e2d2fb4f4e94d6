"""Authentication of /v1 keys: cache, revocation, expiry, last_used_at."""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from accounts import keys
from accounts.auth import authenticate
from accounts.models import ApiKey
from accounts.services import (
    api_key_create,
    api_key_revoke,
    key_cache_key,
    organization_create,
    project_create,
)
from config.errors import AuthenticationFailed
from infra import fastcache

auth = async_to_sync(authenticate)


@pytest.fixture
def key(transactional_db):
    org = organization_create(name="Acme")
    project = project_create(organization=org, name="p")
    return api_key_create(project=project)


def _code(header):
    with pytest.raises(AuthenticationFailed) as info:
        auth(header)
    return info.value.code


def test_valid_key_resolves_to_its_project_and_organization(key):
    api_key, raw = key
    ctx = auth(f"Bearer {raw}")
    assert (ctx.key_id, ctx.project_id, ctx.organization_id) == (
        api_key.pk,
        api_key.project_id,
        api_key.organization_id,
    )


def test_lookup_is_cached(key):
    _, raw = key
    auth(f"Bearer {raw}")
    assert async_to_sync(fastcache.get)(key_cache_key(keys.hash_key(raw))) is not None


@pytest.mark.django_db(transaction=True)
def test_revocation_is_effective_at_once_despite_the_cache():
    org = organization_create(name="Acme")
    api_key, raw = api_key_create(project=project_create(organization=org, name="p"))
    auth(f"Bearer {raw}")  # now cached
    api_key_revoke(api_key=api_key)
    assert _code(f"Bearer {raw}") == "revoked_api_key"


def test_distinct_codes_for_each_failure(key):
    api_key, raw = key
    assert _code(None) == "missing_api_key"
    assert _code("Basic abc") == "missing_api_key"
    assert _code("Bearer sk-not-ours") == "invalid_api_key"
    assert _code(f"Bearer {keys.generate()}") == "invalid_api_key"
    ApiKey.objects.filter(pk=api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _code(f"Bearer {raw}") == "expired_api_key"


def test_error_never_echoes_the_key(key):
    _, raw = key
    bad = raw[:-1] + ("x" if raw[-1] != "x" else "y")
    with pytest.raises(AuthenticationFailed) as info:
        auth(f"Bearer {bad}")
    assert bad not in str(info.value.body())


@pytest.mark.django_db(transaction=True)
def test_last_used_is_written_at_most_once_a_minute():
    org = organization_create(name="Acme")
    api_key, raw = api_key_create(project=project_create(organization=org, name="p"))

    async def twice():
        import asyncio

        from infra import background

        await authenticate(f"Bearer {raw}")
        await asyncio.gather(*background.pending(asyncio.get_running_loop()))
        first = (await ApiKey.objects.aget(pk=api_key.pk)).last_used_at
        await authenticate(f"Bearer {raw}")
        await asyncio.gather(*background.pending(asyncio.get_running_loop()))
        second = (await ApiKey.objects.aget(pk=api_key.pk)).last_used_at
        return first, second

    first, second = async_to_sync(twice)()
    assert first is not None
    assert second == first


@pytest.mark.django_db(transaction=True)
def test_revocation_in_another_process_is_seen_at_once(settings):
    """Another process (the admin, a worker) revokes; this process's cached lookup dies with it."""
    import os
    import subprocess
    import sys

    from tests.live import shared_database_url

    org = organization_create(name="Acme")
    api_key, raw = api_key_create(project=project_create(organization=org, name="p"))
    auth(f"Bearer {raw}")  # cached here
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": shared_database_url(),
    }
    code = (
        "import django; django.setup(); "
        "from accounts.models import ApiKey; from accounts.services import api_key_revoke; "
        f"api_key_revoke(api_key=ApiKey.objects.get(pk={api_key.pk}))"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert _code(f"Bearer {raw}") == "revoked_api_key"
