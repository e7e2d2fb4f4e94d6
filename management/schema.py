"""The OpenAPI description of the management API (drf-spectacular), from the DRF views.

Request bodies come from each view's ``bodies`` (method → serializer), descriptions from the
handler's docstring; responses are JSON objects (their fields are in docs/management_api.md).
:func:`openapi_part` is what ``GET /v1/openapi.json`` merges beside the inference endpoints
(``settings.INFRAI_OPENAPI_PARTS``); ``/v1/organization/openapi.json`` serves it alone.
"""

from __future__ import annotations

import inspect
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.settings import patched_settings
from drf_spectacular.types import OpenApiTypes

URLCONF = "management.resource_urls"
MOUNT = "/organization"  # where the resources sit under /v1

#: drf-spectacular settings of the management document (whatever SPECTACULAR_SETTINGS says).
SETTINGS: dict[str, Any] = {
    "TITLE": "infrai management API",
    "DESCRIPTION": "Projects, API keys, members, usage, costs, request log, wallet and "
    "models of one organization, with an admin key (docs/management_api.md).",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVERS": [{"url": "/v1/organization"}],
    "SCHEMA_PATH_PREFIX": "",
    "COMPONENT_SPLIT_REQUEST": True,
}


class ManagementSchema(AutoSchema):
    def get_request_serializer(self) -> Any:
        return getattr(self.view, "bodies", {}).get(self.method)

    def get_response_serializers(self) -> Any:
        return OpenApiTypes.OBJECT

    def get_operation_id(self) -> str:
        """``project_list_get``: the view and the method (one view per path, so unique)."""
        name = type(self.view).__name__
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
        return f"{snake}_{self.method.lower()}"

    def get_description(self) -> str:
        handler = getattr(self.view, self.method.lower(), None)
        own = type(self.view).__dict__.get("__doc__")
        return inspect.getdoc(handler) or inspect.cleandoc(own or "")


class AdminKeyScheme(OpenApiAuthenticationExtension):
    """``Authorization: Bearer ifr_admin_…``."""

    target_class = "management.auth.AdminKeyAuthentication"
    name = "AdminKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An admin key, ifr_admin_…"}


def management_document() -> dict[str, Any]:
    """The management API's OpenAPI 3.1 document (paths relative to ``/v1/organization``)."""
    with patched_settings(SETTINGS):
        schema: dict[str, Any] = SchemaGenerator(urlconf=URLCONF).get_schema(public=True)
    return schema


def openapi_part() -> dict[str, Any]:
    """The management API as a part of ``/v1/openapi.json``: ``{"paths", "components"}``
    with paths relative to ``/v1`` (``/organization/projects``…); each operation names its
    ``AdminKey`` security scheme, so the document's default (API keys) does not apply."""
    document = management_document()
    return {
        "paths": {MOUNT + path: item for path, item in document["paths"].items()},
        "components": document.get("components", {}),
    }
