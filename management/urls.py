"""``/v1/organization/…``: the management API (Django's stack; see :mod:`config.asgi`)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.permissions import AllowAny

from config.errors import NotFound
from management import schema


def not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Unknown management paths: a 404 in OpenAI's shape, never Django's HTML page."""
    error = NotFound(f"Unknown management API path: {request.path}", code="unknown_url")
    return JsonResponse(error.body(), status=error.status)


class OpenApiDocument(SpectacularJSONAPIView):
    """The management API's OpenAPI document alone, generated from the DRF views (public; also
    merged into ``/v1/openapi.json``)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    urlconf = schema.URLCONF
    serve_public = True
    custom_settings = schema.SETTINGS


urlpatterns = [
    path("openapi.json", OpenApiDocument.as_view()),
    path("", include("management.resource_urls")),
    re_path(r"^(?P<rest>.*)$", not_found),
]
