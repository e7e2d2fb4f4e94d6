"""Websocket routes of the dashboard (live balance and usage)."""

from __future__ import annotations

from typing import Any

websocket_urlpatterns: list[Any] = []
