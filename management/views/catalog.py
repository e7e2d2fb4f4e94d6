"""The public model catalog with prices: ``/v1/organization/models``."""

from __future__ import annotations

from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response

from catalog.selectors import model_prices
from management import render
from management.api import ManagementView, list_response


class Models(ManagementView):
    def get(self, request: Request) -> Response:
        """The public catalog: routable models and their lowest price per 1M tokens (USD) in
        force now (a future-dated price is not shown before its date)."""
        data = [
            {
                "object": "model",
                "id": m.model_id,
                "owned_by": "infrai",
                "vendors": list(m.vendors),
                "capabilities": list(m.capabilities),
                "context_window": m.context_window,
                "pricing": {
                    "input_per_mtok_usd": render.usd(m.input_per_mtok_nanos),
                    "output_per_mtok_usd": render.usd(m.output_per_mtok_nanos),
                },
            }
            for m in model_prices(at=timezone.now())
        ]
        return list_response(data)
