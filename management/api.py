"""The management API's DRF plumbing: the base view, OpenAI-shaped errors, list pagination.

Every view derives from :class:`ManagementView`: admin-key authentication
(:mod:`management.auth`), the per-key rate limit, the role check shared with the dashboard
(:func:`dashboard.permissions.role_allows`) and errors as ``{"error": {...}}``. Nothing here
depends on the project's ``REST_FRAMEWORK`` setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.policy import Actor
from accounts.roles import Role
from config.errors import (
    ApiError,
    AuthenticationFailed,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
    RateLimited,
    internal_error,
)
from dashboard.permissions import ANY_ROLE, role_allows
from inference.errors import api_error
from management.auth import AdminContext, AdminKeyAuthentication, rate_limit
from management.schema import ManagementSchema

log = logging.getLogger(__name__)
M = TypeVar("M", bound=Model)

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def _first_message(detail: Any) -> tuple[str, str | None]:
    """The first message of a DRF ``ValidationError`` detail and the field it is about."""
    if isinstance(detail, dict):
        for field, value in detail.items():
            message, inner = _first_message(value)
            name = str(field) if field != "non_field_errors" else None
            return message, inner or name
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail), None


def to_api_error(exc: Exception) -> ApiError | None:
    """Translate what a view may raise into the platform's error type (None: a bug): an
    :class:`ApiError` or a refusal of billing or the catalog through
    :func:`inference.errors.api_error` (the one table), DRF's and Django's errors here."""
    if (error := api_error(exc)) is not None:
        return error
    if isinstance(exc, drf.ValidationError):
        message, param = _first_message(exc.detail)
        if param:
            message = f"Invalid '{param}': {message}"
        return InvalidRequest(message, param=param)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return AuthenticationFailed(str(exc.detail))
    if isinstance(exc, drf.PermissionDenied | DjangoPermissionDenied):
        return PermissionDenied(str(exc) or "Not allowed.")
    if isinstance(exc, Http404 | drf.NotFound):
        return NotFound("Not found.")
    if isinstance(exc, drf.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, drf.ParseError | drf.UnsupportedMediaType):
        return InvalidRequest(
            f"The body could not be parsed as JSON: {exc.detail}", code="invalid_json"
        )
    if isinstance(exc, drf.Throttled):
        return RateLimited(str(exc.detail))
    if isinstance(exc, drf.APIException):
        error = ApiError(str(exc.detail))
        return error
    return None


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's exception handler for the management API: every error in OpenAI's shape."""
    error = to_api_error(exc)
    if error is None:
        log.exception("management API failure", exc_info=exc)
        error = internal_error()
    return Response(error.body(), status=error.status, headers=error.headers())


class ManagementView(APIView):
    """Base of every ``/v1/organization/…`` view.

    ``roles`` maps an HTTP method to the roles allowed to call it (default: every role). A
    caller with another role gets 403 ``permission_denied``; an id of another organization is
    always 404 (each view looks rows up scoped to :attr:`ctx`'s organization).
    """

    authentication_classes = [AdminKeyAuthentication]
    permission_classes: ClassVar[list[Any]] = []
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    schema = ManagementSchema()  # drf-spectacular, whatever DEFAULT_SCHEMA_CLASS says
    bodies: ClassVar[dict[str, type[Any]]] = {}  # method → request serializer (the schema)
    roles: ClassVar[dict[str, frozenset[Role]]] = {}

    _ratelimit_headers: dict[str, str]

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response]:
        return api_exception_handler

    @property
    def ctx(self) -> AdminContext:
        auth = self.request.auth
        assert isinstance(auth, AdminContext)
        return auth

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self._ratelimit_headers = rate_limit(self.ctx.admin_key)
        allowed = self.roles.get(request.method or "GET", ANY_ROLE)
        if not role_allows(self.ctx.role, allowed):
            raise PermissionDenied(
                f"This admin key acts with the role '{self.ctx.role.value}', which may not do "
                "this in the organization."
            )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        out = super().finalize_response(request, response, *args, **kwargs)
        for name, value in getattr(self, "_ratelimit_headers", {}).items():
            out[name] = value
        return out


def api_actor(view: ManagementView) -> Actor:
    """The person behind the admin key, acting with the key's effective role, as the policy
    checks and the audit log see them (``via="api"``, the key's display form)."""
    key = view.ctx.admin_key
    return Actor(
        user=key.created_by,
        role=view.ctx.role,
        via="api",
        credential=key.display,
    )


def parse_id(value: str, prefix: str, *, param: str | None = None) -> int:
    """``"proj_12"`` → 12; a malformed id raises 404 (like an unknown one) unless ``param`` is
    given, then 400 naming it."""
    tail = value[len(prefix) :] if value.startswith(prefix) else ""
    if tail.isascii() and tail.isdigit() and len(tail) < 19:
        return int(tail)
    if param is not None:
        raise InvalidRequest(f"Invalid '{param}': not a {prefix}… id.", param=param)
    raise NotFound("Not found.")


def int_param(
    request: Request, name: str, *, default: int | None = None, lo: int = 0, hi: int = 2**62
) -> int | None:
    """An integer query parameter in ``[lo, hi]``; 400 naming it otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"Invalid '{name}': expected an integer.", param=name) from None
    if not lo <= value <= hi:
        raise InvalidRequest(f"Invalid '{name}': must be between {lo} and {hi}.", param=name)
    return value


def page(
    request: Request,
    qs: QuerySet[M],
    *,
    prefix: str,
    render: Callable[[M], dict[str, Any]],
    newest_first: bool = False,
) -> Response:
    """One page of ``qs`` by primary key after the ``after`` id: OpenAI's list object
    (``data``, ``first_id``, ``last_id``, ``has_more``). Keyset pagination, no OFFSET."""
    limit = int_param(request, "limit", default=DEFAULT_LIMIT, lo=1, hi=MAX_LIMIT)
    assert limit is not None
    after = request.query_params.get("after")
    if after:
        pk = parse_id(after, prefix, param="after")
        qs = qs.filter(pk__lt=pk) if newest_first else qs.filter(pk__gt=pk)
    rows = list(qs.order_by("-pk" if newest_first else "pk")[: limit + 1])
    return list_response([render(r) for r in rows[:limit]], has_more=len(rows) > limit)


def list_response(data: Sequence[dict[str, Any]], *, has_more: bool = False) -> Response:
    """OpenAI's list object around ``data``."""
    return Response(
        {
            "object": "list",
            "data": list(data),
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": has_more,
        }
    )
