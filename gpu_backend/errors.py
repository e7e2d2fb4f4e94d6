"""OpenAI-shaped errors: ``{"error": {"message", "type", "code", "param"}}`` with a status."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error that is answered to the client as-is, in OpenAI's shape.

    ``status`` is the HTTP status; ``type``/``code``/``param`` follow OpenAI's conventions
    (``invalid_request_error`` for 4xx caused by the request, ``server_error`` for 5xx).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends for this error."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    """A 400 for a request field that is wrong (``param`` names the field)."""
    return APIError(400, message, param=param, code=code)


def unknown_model(model: str) -> APIError:
    """The 404 OpenAI returns for a model id it does not serve."""
    return APIError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def unavailable(message: str) -> APIError:
    """A 503 for a model that failed to load or is shutting down."""
    return APIError(503, message, type="server_error", code="model_unavailable")


def still_loading(model: str, eta_s: float | None) -> APIError:
    """The 503 for a model that is still loading after the bounded wait: says so, with a
    ``Retry-After`` of the estimated seconds left (at least 1)."""
    retry_after = max(1, round(eta_s)) if eta_s is not None else 5
    return APIError(
        503,
        f"The model `{model}` is still loading (about {retry_after} s left); "
        f"retry after {retry_after} s.",
        type="server_error",
        code="model_loading",
        headers={"Retry-After": str(retry_after)},
    )
