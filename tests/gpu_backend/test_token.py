"""The gpu-backend's bearer token: required beyond loopback, checked before anything else."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gpu_backend.app import create_app
from gpu_backend.backend import Backend
from gpu_backend.cli import config_from_args
from gpu_backend.config import ENV_TOKEN, BackendConfig


def _get(app, path: str, headers: dict[str, str] | None = None) -> httpx.Response:  # type: ignore[no-untyped-def]
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://backend") as client:
            return await client.get(path, headers=headers or {})

    return asyncio.run(go())


def test_with_a_token_every_request_but_health_must_carry_it():
    app = create_app(Backend(BackendConfig(token="s3cret-token")))
    refused = _get(app, "/v1/models")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert _get(app, "/v1/models", {"authorization": "Bearer wrong"}).status_code == 401
    assert _get(app, "/v1/models", {"authorization": "Bearer s3cret-token"}).status_code == 200
    assert _get(app, "/health").status_code != 401


def test_binding_beyond_loopback_needs_a_token(monkeypatch):
    monkeypatch.delenv(ENV_TOKEN, raising=False)
    with pytest.raises(SystemExit):
        config_from_args(["--host", "0.0.0.0"])
    assert config_from_args(["--host", "127.0.0.1"]).token == ""
    monkeypatch.setenv(ENV_TOKEN, "s3cret-token")
    assert config_from_args(["--host", "0.0.0.0"]).token == "s3cret-token"
