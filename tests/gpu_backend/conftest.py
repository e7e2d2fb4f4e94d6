"""Clients on the real gpu-backend server for these tests.

The server itself is the session fixture ``backend_url`` of :mod:`tests.gpu` (registered in
``tests/conftest.py``, shared with the gateway's tests).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.gpu import model_cache_dir

__all__ = ["model_cache_dir"]


@pytest.fixture(scope="session")
def http(backend_url: str) -> Iterator[httpx.Client]:
    """An httpx client on the backend."""
    with httpx.Client(base_url=backend_url, timeout=120.0) as client:
        yield client


@pytest.fixture(scope="session")
def client(backend_url: str) -> openai.OpenAI:
    """The OpenAI SDK pointed at the backend (it needs no key; any string will do)."""
    return openai.OpenAI(
        base_url=backend_url + "/v1", api_key="unused", max_retries=0, timeout=120.0
    )
