"""Fixtures of tests/inference the infrastructure tests share (the fake vendors, a client)."""

from tests.inference.conftest import _fake_servers, client_for, fake_catalog, fakes  # noqa: F401
