"""The one exception hierarchy of the platform and its OpenAI error shape.

Every failure that reaches an API caller is an :class:`ApiError` (or a subclass). The HTTP layer
turns it into ``{"error": {"message", "type", "code", "param"}}`` with :attr:`ApiError.status`
and :meth:`ApiError.headers` — that rendering lives in :func:`ApiError.body` and nowhere else.

The statuses are chosen so the official OpenAI SDKs raise their matching exception class:
400 ``BadRequestError``, 401 ``AuthenticationError``, 403 ``PermissionDeniedError``,
404 ``NotFoundError``, 429 ``RateLimitError``, 5xx ``InternalServerError``; 402/405/413 surface
as ``APIStatusError`` with the status. ``docs/errors.md`` lists every code (a test keeps the two
in step).
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApiError(Exception):
    """An error with an OpenAI-shaped body. Subclasses fix status, type and default code."""

    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    default_code: ClassVar[str] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self._headers = headers or {}

    def headers(self) -> dict[str, str]:
        """Extra response headers (``retry-after``, ``x-should-retry`` …)."""
        return dict(self._headers)

    def body(self) -> dict[str, Any]:
        """The OpenAI error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.code!r}, {self.message!r})"


class InvalidRequest(ApiError):
    """400: the request is malformed or breaks a rule. ``param`` names the field."""

    status = 400
    type = "invalid_request_error"
    default_code = "invalid_value"


class AuthenticationFailed(ApiError):
    """401: missing, malformed, unknown, revoked or expired API key."""

    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"


class InsufficientQuota(ApiError):
    """402: the wallet (``insufficient_quota``) or a project budget cannot pay for the call.

    Carries ``x-should-retry: false`` so the OpenAI SDKs never retry it.
    """

    status = 402
    type = "insufficient_quota"
    default_code = "insufficient_quota"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        available_nanos: int | None = None,
    ) -> None:
        super().__init__(message, code=code, param=param, headers=headers)
        #: What the caller could still reserve, in nano-USD (``None`` when not known): lets the
        #: request path say which ``max_tokens`` would fit.
        self.available_nanos = available_nanos

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


class PermissionDenied(ApiError):
    """403: authenticated, but not allowed to do this."""

    status = 403
    type = "permission_error"
    default_code = "permission_denied"


class NotFound(ApiError):
    """404: unknown path or model."""

    status = 404
    type = "invalid_request_error"
    default_code = "not_found"


class MethodNotAllowed(ApiError):
    """405: the path exists, the method does not."""

    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"


class RequestTooLarge(ApiError):
    """413: the body is larger than the configured limit."""

    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"


class RateLimited(ApiError):
    """429: a per-key limit is exhausted; ``retry-after`` says when to come back."""

    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class UpstreamError(ApiError):
    """502: every candidate vendor failed (after failover)."""

    status = 502
    type = "api_error"
    default_code = "vendor_error"


class NoRoutableOffering(ApiError):
    """503: nothing in the catalog can serve the request right now.

    ``permanent``: it will not change by waiting (the only offerings are disabled or their
    vendor is not configured): the response carries ``x-should-retry: false`` so the OpenAI
    SDKs do not retry it. A transient refusal (open circuits, a vendor not verified yet) may be
    retried.
    """

    status = 503
    type = "api_error"
    default_code = "no_routable_offering"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        permanent: bool = False,
    ) -> None:
        super().__init__(message, code=code, param=param, headers=headers)
        self.permanent = permanent

    def headers(self) -> dict[str, str]:
        out = super().headers()
        if self.permanent:
            out["x-should-retry"] = "false"
        return out


class ServiceUnavailable(ApiError):
    """503: this process cannot take the call now (it is shutting down); retrying may work."""

    status = 503
    type = "api_error"
    default_code = "service_unavailable"


class UpstreamTimeout(ApiError):
    """504: every candidate vendor timed out."""

    status = 504
    type = "api_error"
    default_code = "vendor_timeout"


def invalid_type(param: str, expected: str) -> InvalidRequest:
    """A 400 for a field of the wrong JSON type."""
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}.", code="invalid_type", param=param
    )


def missing_param(param: str) -> InvalidRequest:
    """A 400 for a required field that is absent."""
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", code="missing_required_parameter", param=param
    )


def internal_error() -> ApiError:
    """The 500 for a failure of our own: it says so, and that nothing was charged for it."""
    return ApiError(
        "The server had an error while processing your request. This is our fault, not your "
        "request's; nothing was charged."
    )
