"""The one exception hierarchy of the platform and its OpenAI error shape.

Every failure that reaches an API caller is an :class:`ApiError` (or a subclass). The HTTP layer
turns it into ``{"error": {"message", "type", "code", "param"}}`` with :attr:`ApiError.status`
and :meth:`ApiError.headers` — that rendering lives in :func:`ApiError.body` and nowhere else.

The statuses are chosen so the official OpenAI SDKs raise their matching exception class:
400 ``BadRequestError``, 401 ``AuthenticationError``, 403 ``PermissionDeniedError``,
404 ``NotFoundError``, 429 ``RateLimitError``, 5xx ``InternalServerError``; 402/405/413 surface
as ``APIStatusError`` with the status. ``docs/errors.md`` lists every code (a test keeps the two
in step).

These are the web layer's errors. The domain apps below it raise their own exceptions instead
(:mod:`billing.errors`, :mod:`catalog.errors`), which :func:`inference.errors.api_error` maps to
these in one table; nothing under ``inference`` raises an HTTP error for a refusal of theirs.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypedDict, Unpack

#: The client errors a retry may fix (timeout, conflict, rate limit), as the OpenAI SDKs see it.
RETRYABLE_4XX = frozenset({408, 409, 429})


class ErrorOptions(TypedDict, total=False):
    """What every :class:`ApiError` may be given besides its message: ``code`` (else the class's
    default), ``param`` (the request field at fault) and extra response ``headers``."""

    code: str | None
    param: str | None
    headers: dict[str, str] | None


class ApiError(Exception):
    """An error with an OpenAI-shaped body.

    A subclass fixes its status, type and default code in its class line
    (``class NotFound(ApiError, status=404, type="invalid_request_error", code="not_found")``).
    """

    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    default_code: ClassVar[str] = "internal_error"

    def __init_subclass__(cls, *, status: int, type: str, code: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.status = status
        cls.type = type
        cls.default_code = code

    def __init__(self, message: str, **options: Unpack[ErrorOptions]) -> None:
        super().__init__(message)
        self.message = message
        self.code = options.get("code") or self.default_code
        self.param = options.get("param")
        self._headers = options.get("headers") or {}

    def headers(self) -> dict[str, str]:
        """Extra response headers (``retry-after`` …), with ``x-should-retry: false`` on every
        4xx a retry cannot fix (all but 408, 409 and 429): the OpenAI SDKs retry only those
        and 5xx, and the header keeps any other client from trying."""
        out = dict(self._headers)
        if 400 <= self.status < 500 and self.status not in RETRYABLE_4XX:
            out.setdefault("x-should-retry", "false")
        return out

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


class InvalidRequest(ApiError, status=400, type="invalid_request_error", code="invalid_value"):
    """400: the request is malformed or breaks a rule. ``param`` names the field."""


class AuthenticationFailed(
    ApiError, status=401, type="authentication_error", code="invalid_api_key"
):
    """401: missing, malformed, unknown, revoked or expired API key."""


class InsufficientQuota(ApiError, status=402, type="insufficient_quota", code="insufficient_quota"):
    """402: the wallet (``insufficient_quota``), a project budget or a key budget cannot pay for
    the call (``x-should-retry: false``, as every such 4xx). Billing refuses a hold with
    :class:`billing.errors.InsufficientFunds`; :func:`inference.errors.insufficient_quota`
    renders it as this."""


class PermissionDenied(ApiError, status=403, type="permission_error", code="permission_denied"):
    """403: authenticated, but not allowed to do this."""


class NotFound(ApiError, status=404, type="invalid_request_error", code="not_found"):
    """404: unknown path or model."""


class MethodNotAllowed(
    ApiError, status=405, type="invalid_request_error", code="method_not_allowed"
):
    """405: the path exists, the method does not."""


class RequestTooLarge(ApiError, status=413, type="invalid_request_error", code="request_too_large"):
    """413: the body is larger than the configured limit."""


class RateLimited(ApiError, status=429, type="rate_limit_error", code="rate_limit_exceeded"):
    """429: a per-key limit is exhausted; ``retry-after`` says when to come back."""


class UpstreamError(ApiError, status=502, type="api_error", code="vendor_error"):
    """502: every candidate vendor failed (after failover)."""


class NoRoutableOffering(ApiError, status=503, type="api_error", code="no_routable_offering"):
    """503: nothing in the catalog can serve the request right now (routing's
    :class:`catalog.errors.NoRoute`, or every candidate's circuit open at call time).

    ``permanent``: it will not change by waiting (the only offerings are disabled or their
    vendor is not configured): the response carries ``x-should-retry: false`` so the OpenAI
    SDKs do not retry it. A transient refusal (open circuits, a vendor not verified yet) may be
    retried.
    """

    def __init__(
        self, message: str, *, permanent: bool = False, **options: Unpack[ErrorOptions]
    ) -> None:
        super().__init__(message, **options)
        self.permanent = permanent

    def headers(self) -> dict[str, str]:
        out = super().headers()
        if self.permanent:
            out["x-should-retry"] = "false"
        return out


class ServiceUnavailable(ApiError, status=503, type="api_error", code="service_unavailable"):
    """503: this process cannot take the call now (it is shutting down); retrying may work."""


class UpstreamTimeout(ApiError, status=504, type="api_error", code="vendor_timeout"):
    """504: every candidate vendor timed out.

    Carries ``x-should-retry: false``: the vendor request was closed (the generation stopped),
    and the same request would take as long again, so an SDK's automatic retry would only start
    more generations; the message says what to change instead.
    """

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


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
