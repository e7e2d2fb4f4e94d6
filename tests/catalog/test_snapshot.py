"""The in-process catalog snapshot: served without queries, rebuilt after a catalog write."""

from __future__ import annotations

import asyncio

import pytest

from catalog.models import Offering
from catalog.selectors import VERSION_KEY, catalog_snapshot
from catalog.services import catalog_changed
from config import fastcache

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot():
    return asyncio.run(catalog_snapshot())


def test_snapshot_is_reused_until_the_version_changes(seeded, settings, django_assert_num_queries):
    settings.INFRAI_CATALOG_CHECK_S = 0  # check the shared version on every call
    first = snapshot()
    with django_assert_num_queries(0):
        assert snapshot() is first
    Offering.objects.filter(model__model_id="gpt-4o").update(enabled=False)
    assert snapshot() is first  # a raw write without a version bump is not seen …
    catalog_changed()
    rebuilt = snapshot()  # … the bump is
    assert rebuilt is not first
    gpt4o = next(o for o in rebuilt.offerings if o.model_id == "gpt-4o")
    assert gpt4o.unroutable_detail == "offering disabled"
    assert gpt4o.unroutable_reason == "vendor openai does not offer this model now"


def test_another_process_bumping_the_version_is_noticed(seeded, settings):
    settings.INFRAI_CATALOG_CHECK_S = 0
    first = snapshot()
    fastcache.set_sync(VERSION_KEY, "bumped-elsewhere", None)  # another process's write
    assert snapshot() is not first
    assert snapshot().version == "bumped-elsewhere"


def test_version_checks_are_rate_limited(seeded, settings):
    settings.INFRAI_CATALOG_CHECK_S = 3600
    first = snapshot()
    fastcache.set_sync(VERSION_KEY, "bumped-elsewhere", None)
    assert snapshot() is first
