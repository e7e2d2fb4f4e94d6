"""Vendor failures as the platform sees them, translated where they enter (see ``translate``).

``retryable`` says whether the next candidate may be tried: connection failures, timeouts,
429, 5xx and the vendor refusing our credentials or model (401/403/404) are; any other 4xx is
about the request itself and is not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx


class VendorError(Exception):
    """A vendor call that did not produce a usable answer."""

    retryable: bool = True
    kind: str = "vendor_error"

    def __init__(self, message: str, *, status: int | None = None, vendor: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.vendor = vendor


class VendorUnavailable(VendorError):
    """Could not connect, or the connection broke."""

    kind = "vendor_unavailable"


class VendorTimeout(VendorError):
    """Connect, read (stall between chunks) or pool timeout."""

    kind = "vendor_timeout"


class VendorRateLimited(VendorError):
    """The vendor said 429."""

    kind = "vendor_rate_limited"


class VendorServerError(VendorError):
    """The vendor said 5xx (or 408)."""

    kind = "vendor_server_error"


class VendorMisconfigured(VendorError):
    """The vendor refused *us* (401/403) or does not know the upstream model (404): a catalog
    or credentials problem of this vendor, so the next candidate may well succeed."""

    kind = "vendor_misconfigured"


class VendorRejected(VendorError):
    """The vendor refused the request itself (4xx): trying elsewhere would not help.

    ``code`` / ``param``: OpenAI's error code and the request field at fault, where the vendor
    said which (its own OpenAI-style ``code``/``param``, or a context overflow recognised in its
    message: ``context_length_exceeded`` on ``messages``); ``None`` when it did not.
    """

    retryable = False
    kind = "vendor_rejected"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        vendor: str = "",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message, status=status, vendor=vendor)
        self.code = code
        self.param = param


class VendorLoading(VendorError):
    """The vendor is up but the model is still loading (503 ``model_loading``, as the
    gpu-backend answers after its bounded wait): not a failure of the vendor, so its circuit
    is not charged with it; ``retry_after_s`` is the vendor's estimate."""

    kind = "vendor_model_loading"

    def __init__(
        self, message: str, *, status: int | None = None, vendor: str = "", retry_after_s: int = 5
    ) -> None:
        super().__init__(message, status=status, vendor=vendor)
        self.retry_after_s = retry_after_s


class VendorProtocolError(VendorError):
    """The vendor answered something that is not its documented wire format."""

    kind = "vendor_protocol_error"


# How vendors word a prompt that does not fit (OpenAI, vLLM, SGLang, Anthropic, DashScope …).
_CONTEXT_OVERFLOW = re.compile(
    r"context[ _]length|context window|maximum context|prompt is too long|input is too long"
    r"|too many (input )?tokens|exceeds? the (model'?s? )?(maximum )?(context|input)",
    re.IGNORECASE,
)
_CODE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


def error_fields(body: Any) -> tuple[str, str | None, str | None]:
    """``(message, code, param)`` of an OpenAI-style error body — ``{"error": {…}}``, or vLLM's
    flat ``{"object": "error", …}`` — with a context overflow mapped to OpenAI's
    ``context_length_exceeded`` on ``messages``. A code that is not an OpenAI-style string (vLLM
    puts the HTTP status there) is dropped."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = body if isinstance(body, dict) and "message" in body else {}
    message = str(error.get("message") or "")
    code = error.get("code")
    code = code if isinstance(code, str) and _CODE.match(code) else None
    param = error.get("param")
    param = param if isinstance(param, str) and param else None
    if code == "context_length_exceeded" or (
        code in (None, "invalid_request_error", "invalid_value", "invalid_request")
        and _CONTEXT_OVERFLOW.search(message)
    ):
        code, param = "context_length_exceeded", param or "messages"
    return message, code, param


def from_status(
    status: int,
    message: str,
    *,
    vendor: str,
    code: str | None = None,
    param: str | None = None,
    retry_after: str | None = None,
) -> VendorError:
    """The error for a non-2xx vendor status (``code``/``param``: see :class:`VendorRejected`;
    ``retry_after``: the vendor's ``Retry-After`` header)."""
    if status == 503 and code == "model_loading":
        wait = int(retry_after) if retry_after and retry_after.isdigit() else 5
        return VendorLoading(message, status=status, vendor=vendor, retry_after_s=min(wait, 600))
    if status == 429:
        return VendorRateLimited(message, status=status, vendor=vendor)
    if status >= 500 or status == 408:
        return VendorServerError(message, status=status, vendor=vendor)
    if status in (401, 403, 404):
        return VendorMisconfigured(message, status=status, vendor=vendor)
    return VendorRejected(message, status=status, vendor=vendor, code=code, param=param)


def malformed_event(vendor: str) -> VendorProtocolError:
    """A stream event whose data is not JSON."""
    return VendorProtocolError(f"{vendor} sent a malformed stream event", vendor=vendor)


@contextmanager
def translate(vendor: str) -> Iterator[None]:
    """Turn the HTTP clients' exceptions raised inside the block into :class:`VendorError`
    (aiohttp for vendor calls, httpx for fetching a vendor's image URL): a timeout is
    :class:`VendorTimeout`; anything else (refused, reset, malformed HTTP) is
    :class:`VendorUnavailable`."""
    try:
        yield
    except (TimeoutError, httpx.TimeoutException) as exc:  # aiohttp's timeouts are TimeoutErrors
        raise VendorTimeout(f"{vendor}: timed out ({type(exc).__name__})", vendor=vendor) from exc
    except (aiohttp.ClientError, httpx.HTTPError, ConnectionError) as exc:
        raise VendorUnavailable(
            f"{vendor}: connection failed ({type(exc).__name__})", vendor=vendor
        ) from exc
