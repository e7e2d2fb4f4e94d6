"""A word-vector embeddings vendor on 127.0.0.1 beside the chat fakes, and SDK clients.

``words`` embeds a text as a hashed bag of its words (``DIMENSIONS`` dimensions, unit length),
so texts sharing words are neighbours — retrieval can be checked without a neural model. In
the catalog it is ``test-words`` (embeddings, $0.02 / 1M tokens), the only embeddings model:
``model="auto"`` routes to it.
"""

from __future__ import annotations

import hashlib
import math
import re
import tempfile
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from django.apps import apps as django_apps

from catalog.documents import catalog_load
from config.services import LocalServices
from tests.dashboard.conftest import make_org, make_user, member_client  # noqa: F401
from tests.fakes.vendors import FakeVendor
from tests.inference.conftest import (  # noqa: F401  (fixtures)
    EMBED_PRICE,
    _fake_servers,
    client_for,
    fake_catalog,
    fakes,
)

DIMENSIONS = 256
EMBED_MODEL = "test-words"
_STOP = {"the", "a", "an", "of", "is", "are", "and", "to", "in", "on", "which", "what", "it"}


def word_vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """A unit vector: each non-stop word adds ±1 at a position its hash picks."""
    out = [0.0] * dimensions
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in _STOP:
            continue
        digest = hashlib.sha256(word.encode()).digest()
        out[int.from_bytes(digest[:4], "big") % dimensions] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in out)) or 1.0
    return [v / norm for v in out]


def reseed_vector_price() -> None:
    """Put back the vector store price that migration 0002 seeds: ``transactional_db`` empties
    every table between tests, and the vector endpoints refuse to work without a price."""
    import_module("vectors.migrations.0002_seed_price").seed(django_apps, None)


class WordVendor(FakeVendor):
    """A fake vendor whose embeddings are :func:`word_vector`."""

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        raw = body["input"]
        items = [raw] if isinstance(raw, str) else raw
        data = [
            {"object": "embedding", "index": i, "embedding": word_vector(text)}
            for i, text in enumerate(items)
        ]
        used = sum(len(t.split()) for t in items)
        usage = {"prompt_tokens": used, "total_tokens": used}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )


@pytest.fixture(scope="session")
def _word_server() -> Iterator[WordVendor]:
    with WordVendor(models=["words"]) as server:
        yield server


@pytest.fixture
def words(
    _word_server: WordVendor,
    fake_catalog: dict[str, FakeVendor],  # noqa: F811
) -> WordVendor:
    """The catalog of :func:`fake_catalog` plus ``test-words`` on the word vendor."""
    _word_server.requests = []
    vendor: dict[str, Any] = {
        "name": "words",
        "display_name": "Words",
        "adapter_kind": "openai",
        "base_url": _word_server.url,
        "credentials_env": "",
        "region": "eu",
        "enabled": True,
        "verified_models": ["words"],
    }
    model = {
        "id": EMBED_MODEL,
        "display_name": EMBED_MODEL,
        "owned_by": "tests",
        "capabilities": ["embeddings"],
        "tasks": ["retrieval"],
        "context_window": 8192,
        "max_output_tokens": 0,
        "embedding_dimensions": DIMENSIONS,
        "quality_tier": 5,
        "created": "2025-01-01",
        "parameters": {},
        "offerings": [{"vendor": "words", "upstream_model": "words", "prices": [EMBED_PRICE]}],
    }
    catalog_load({"vendors": [vendor], "models": [model]})
    reseed_vector_price()
    return _word_server


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL with pgvector of its own (config.services; the suite's database may be one
    without the extension, such as CI's)."""
    with tempfile.TemporaryDirectory(prefix="infrai-pgvector-") as data:
        services = LocalServices(Path(data), throwaway=True)
        try:
            yield services.start()["DATABASE_URL"]
        finally:
            services.stop()
