"""Websocket routes of the dashboard (live balance and usage)."""

from __future__ import annotations

from typing import Any

from django.urls import path

from dashboard.consumers import LiveConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/o/<slug:slug>/live/", LiveConsumer.as_asgi()),
]
