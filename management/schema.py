"""The OpenAPI description of the management API (drf-spectacular), from the DRF views.

Request bodies come from each view's ``bodies`` (method → serializer), descriptions from the
handler's docstring; responses are JSON objects (their fields are in docs/management_api.md).
"""

from __future__ import annotations

import inspect
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes


class ManagementSchema(AutoSchema):
    def get_request_serializer(self) -> Any:
        return getattr(self.view, "bodies", {}).get(self.method)

    def get_response_serializers(self) -> Any:
        return OpenApiTypes.OBJECT

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
